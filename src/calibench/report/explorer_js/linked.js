  // ------------------------------------------------------------ parallel coordinates, brushing, one selection
  // One selection of the table on show, shared by the parallel coordinates, the scatter and the networks
  // table: the rows inside every brushed axis's ranges (a brush: drag along an axis) and, if a box or
  // lasso was drawn on the scatter, inside it. The scatter dims the rest, the networks table lists it.
  const P = {axes: null, brushes: {}, lasso: null, lassoVersion: 0, rows: [], values: [], drawn: null, view: null,
             updated: null, count: null, marks: null, maxLines: 2000};
  // A seeded sample of at most P.maxLines of the rows ``idx`` (every one when fewer), in their order: 32,768
  // lines take 0.4 s to stroke on a CPU, and a brush strokes them again; the brushes select among every row.
  function sampleRows(idx, most) {
    if (idx.length <= most) return idx;
    let seed = 12345;
    const random = () => { seed = (seed + 0x6d2b79f5) | 0; let z = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      z = (z + Math.imul(z ^ (z >>> 7), 61 | z)) ^ z; return ((z ^ (z >>> 14)) >>> 0) / 4294967296; };
    const pick = idx.slice();
    for (let k = 0; k < most; k++) { const j = k + Math.floor(random() * (pick.length - k)); [pick[k], pick[j]] = [pick[j], pick[k]]; }
    return pick.slice(0, most).sort((a, b) => a - b);
  }
  function defaultAxes(t) {
    const hcs = t.columns.find(c => c.name.startsWith('hcs_'));
    return ['accuracy', 'params', 'flops', 'pre_ece_15', 'post_ece_15', hcs && hcs.name]
      .filter(n => n && t.columns.some(c => c.name === n));
  }
  const brushText = () => Object.entries(P.brushes).flatMap(([n, rs]) => rs.map(([lo, hi]) => `${n}:${lo}:${hi}`)).join(';');
  function brushesFrom(text) {  // "accuracy:0.5:0.9;pre_ece_15:0:0.02" (brushText's form, the URL's b)
    const out = {};
    for (const part of (text || '').split(';').filter(Boolean)) {
      const m = /^(.+):(-?[\d.e+-]+):(-?[\d.e+-]+)$/i.exec(part);
      if (m) (out[m[1]] = out[m[1]] || []).push([Number(m[2]), Number(m[3])]);
    }
    return out;
  }
  async function drawParcoords() {
    const el = $('parcoords'), t = byId($('table').value);
    if (P.axes === null) P.axes = defaultAxes(t);
    P.axes = P.axes.filter(n => t.columns.some(c => c.name === n));
    for (const n of Object.keys(P.brushes)) if (!P.axes.includes(n)) delete P.brushes[n];
    $('paxes').value = P.axes.join(', ');
    addChoices($('paddcol'), t, P.axes);
    el.classList.toggle('hidden', !$('pshow').checked);
    if (!$('pshow').checked) return;
    const cn = $('ccol').value, numericColour = cn && !categoriesOf(t, cn) ? cn : null;
    const drawn = JSON.stringify([t.id, P.axes, brushText(), P.lasso ? P.lassoVersion : null, numericColour, P.maxLines]);
    if (drawn === P.drawn) return;  // as it is (a brush a user drew is in the plot already)
    const r = await rows(t), values = await Promise.all(P.axes.map(n => column(t, n)));
    const finite = [];  // the measured rows with a finite value on every axis (a copy repeats its representative)
    for (let i = 0; i < t.n; i++) if (r.isRep[i] && values.every(v => Number.isFinite(v[i]))) finite.push(i);
    const idx = sampleRows(finite, P.maxLines);
    P.rows = idx;
    const axes = P.axes.map((name, k) => {  // an axis spans every measured network, not only the lines drawn
      let lo = Infinity, hi = -Infinity;
      for (const i of finite) { const v = values[k][i]; if (v < lo) lo = v; if (v > hi) hi = v; }
      return {name, values: idx.map(i => values[k][i]), cats: categoriesOf(t, name), range: finite.length ? [lo, hi] : null};
    });
    let colours = '#4c72b0', colourbar = null;
    if (P.lasso) {  // the scatter's box or lasso: its networks in red
      colours = idx.map(i => P.lasso.has(i) ? '#c44e52' : '#c8c8c8');
    } else {
      const c = numericColour ? await column(t, numericColour) : null;
      if (c && idx.every(i => Number.isFinite(c[i]))) {
        const diverging = cn.endsWith(DIFF), scale = diverging ? 'RdBu' : 'Viridis';
        let lo = Infinity, hi = -Infinity;
        for (const i of idx) { lo = Math.min(lo, c[i]); hi = Math.max(hi, c[i]); }
        const range = colourRange(lo, hi, diverging);
        if (range) {
          [lo, hi] = range;
          const span = hi > lo ? hi - lo : 1;  // 64 shades: the lines are stroked one path per shade
          colours = idx.map(i => scaleColour(scale, Math.round((c[i] - lo) / span * 63) / 63));
          colourbar = {title: cn, scale, lo, hi};
        }
      }
    }
    const missing = t.n_measured - finite.length, notes = [];
    if (idx.length < finite.length) notes.push(`lines: a seeded sample of ${idx.length} of the ${finite.length} measured networks `
      + '(a brush selects among every network)');
    if (missing) notes.push(`${missing} measured networks without a finite value on every axis are not drawn`);
    if (!P.view) P.view = makeParcoords(el, () => brushed().catch(fail), names => { P.axes = names; relink().catch(fail); });
    P.view.draw({axes, colours, colourbar, brushes: {...P.brushes}, note: notes.join('; ')});
    P.values = axes.map(a => a.values);
    P.drawn = drawn;
    stamp('parcoords');
  }
  async function brushed() {  // a brush drawn on an axis: the plot has it already
    const started = performance.now();
    P.brushes = Object.fromEntries(Object.entries(P.view.view.spec.brushes).map(([n, rs]) => [n, rs.map(r => r.map(Number))]));
    if (P.drawn !== null) {  // the plot shows these brushes: nothing to redraw for them
      const drawn = JSON.parse(P.drawn);
      drawn[2] = brushText();
      P.drawn = JSON.stringify(drawn);
    }
    await applySelection();
    P.updated = {ms: performance.now() - started, count: P.count};
  }
  // brushes set as a drag sets them ({name: [[lo, hi], ...]}): the URL's b, and the tests' exact cuts
  P.brush = async brushes => { P.brushes = brushes; await relink(); };

  // the selection from the brushes and the lasso, to the scatter, the networks table, the counts and the URL
  async function applySelection() {
    const t = byId($('table').value), r = await rows(t);
    const names = Object.keys(P.brushes).filter(n => P.brushes[n].length && t.columns.some(c => c.name === n));
    const cols = await Promise.all(names.map(n => column(t, n))), ranges = names.map(n => P.brushes[n]);
    let picked = null;
    if (names.length || P.lasso) {
      picked = new Set();
      for (let i = 0; i < t.n; i++) {
        if (P.lasso && !P.lasso.has(i)) continue;
        let ok = true;
        for (let k = 0; ok && k < names.length; k++) {
          const v = cols[k][i];
          ok = ranges[k].some(([lo, hi]) => v >= lo && v <= hi);
        }
        if (ok) picked.add(i);
      }
    }
    P.count = picked ? picked.size : null;
    N.selection = picked ? {table: t.id, rows: picked} : null;
    const what = [names.map(n => `${n} in ${P.brushes[n].map(([lo, hi]) => `[${fmt(lo)}, ${fmt(hi)}]`).join(' or ')}`).join(', '),
      P.lasso ? `the ${P.lasso.size} in the scatter's box or lasso` : ''].filter(Boolean).join('; ');
    $('pcount').textContent = picked ? `${picked.size} of ${t.n} networks selected (${what})`
      : `${t.n} networks; drag along an axis to select`;
    setHash({pa: P.axes ? P.axes.join(',') : null, b: brushText() || null});
    const jobs = [markScatter(t, r, picked)];
    if (!$('tab-networks').classList.contains('hidden')) jobs.push(networksTab());
    await Promise.all(jobs);
  }
  // The selection on the scatter: a veil over each panel and its points drawn again above it, on a canvas
  // over the plot (a restyle of 32,768 WebGL points costs plotly 200-400 ms on a CPU). P.marks: the
  // points drawn bright, by trace; null when nothing is selected.
  async function markScatter(t, r, picked) {
    const gd = $('scatter'), marks = [];
    if (picked && gd.data) {
      const indices = new Set([...picked].map(i => r.index[i]));
      for (const [curve, tr] of gd.data.entries()) {
        if (tr.name === 'selected' || !tr.customdata) continue;
        const u = byId(traceTable(tr));
        if (!u || u.space !== t.space || u.hp !== t.hp) continue;
        const ru = await rows(u);
        marks.push({curve, points: tr.customdata.flatMap((d, j) =>
          (u.id === t.id ? picked.has(d[0]) : indices.has(ru.index[d[0]])) ? [j] : [])});
      }
    }
    P.marks = picked ? marks : null;
    drawMarks();
  }
  function drawMarks() {
    const gd = $('scatter'), dpr = window.devicePixelRatio || 1, w = gd.clientWidth, h = gd.clientHeight;
    const paper = gd.querySelector('.svg-container'), fl = gd._fullLayout, top = fl && fl._toppaper;
    if (!paper || !w) return;  // no plot yet, or its tab hidden: drawn when shown (moveLinked)
    if (!P.canvas) {
      P.canvas = document.createElement('canvas');
      P.canvas.id = 'scattermarks';
      P.canvas.style.cssText = 'position:absolute;left:0;top:0;pointer-events:none';
    }
    const cv = P.canvas, above = top && top.node();  // over the WebGL points, under hover labels and outlines
    if (cv.parentNode !== paper || (above && cv.nextSibling !== above)) paper.insertBefore(cv, above || null);
    cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    cv.style.width = w + 'px'; cv.style.height = h + 'px';
    const ctx = cv.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    if (!P.marks || !fl || !gd.data) return;
    const axes = tr => [fl['xaxis' + (tr.xaxis || 'x').slice(1)], fl['yaxis' + (tr.yaxis || 'y').slice(1)]];
    const veiled = new Set();
    ctx.fillStyle = 'rgba(255,255,255,0.8)';  // the rest at a fifth of its strength
    for (const {curve} of P.marks) {
      const [xa, ya] = axes(gd.data[curve]);
      if (!xa || !ya || veiled.has(xa._id + ya._id)) continue;
      veiled.add(xa._id + ya._id);
      ctx.fillRect(xa._offset, ya._offset, xa._length, ya._length);
    }
    for (const {curve, points} of P.marks) {
      const tr = gd.data[curve], [xa, ya] = axes(tr), m = tr.marker || {};
      if (!xa || !ya) continue;
      const size = m.size || 6, half = size / 2, numeric = Array.isArray(m.color) || ArrayBuffer.isView(m.color);
      let lo = m.cmin, hi = m.cmax;
      if (numeric && !(lo < hi)) {
        [lo, hi] = [Infinity, -Infinity];
        for (const v of m.color) if (Number.isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      }
      const scale = typeof m.colorscale === 'string' && SCALES[m.colorscale] ? m.colorscale : 'Viridis';
      ctx.save();
      ctx.beginPath(); ctx.rect(xa._offset, ya._offset, xa._length, ya._length); ctx.clip();
      ctx.globalAlpha = m.opacity === undefined ? 1 : m.opacity;
      for (const j of points) {
        const x = xa._offset + xa.l2p(xa.d2l(tr.x[j])), y = ya._offset + ya.l2p(ya.d2l(tr.y[j]));
        ctx.fillStyle = numeric ? scaleColour(scale, hi > lo ? (m.color[j] - lo) / (hi - lo) : 0.5) : (m.color || '#4c72b0');
        if (size <= 4) ctx.fillRect(x - half, y - half, size, size);
        else { ctx.beginPath(); ctx.arc(x, y, half, 0, 2 * Math.PI); ctx.fill(); }
      }
      ctx.restore();
    }
    const ring = gd.data.find(d => d.name === 'selected');  // the network clicked, above the veil too
    if (ring) {
      const [xa, ya] = axes(ring);
      if (xa && ya) {
        ctx.strokeStyle = '#e00'; ctx.lineWidth = 3; ctx.beginPath();
        ctx.arc(xa._offset + xa.l2p(xa.d2l(ring.x[0])), ya._offset + ya.l2p(ya.d2l(ring.y[0])), 8, 0, 2 * Math.PI);
        ctx.stroke();
      }
    }
  }
  const relink = () => drawParcoords().then(applySelection);  // the plot, then the selection it makes
  function linkedControls() {
    $('pshow').onchange = () => drawParcoords().catch(fail);
    $('paxes').onchange = () => {
      const t = byId($('table').value), asked = $('paxes').value.split(',').map(s => s.trim()).filter(Boolean);
      const unknown = asked.filter(n => !t.columns.some(c => c.name === n));
      P.axes = asked.filter(n => !unknown.includes(n));
      relink().then(() => {
        if (unknown.length) $('pcount').textContent += ` · ${tableLabel(t)} has no column ${unknown.join(', ')}`;
      }).catch(fail);
    };
    $('padd').onclick = () => {
      if ($('paddcol').value && !P.axes.includes($('paddcol').value)) P.axes.push($('paddcol').value);
      relink().catch(fail);
    };
    $('pclear').onclick = async () => {
      // the box or lasso outline off first: that relayout reports an empty selection, then forgotten
      await Promise.resolve(Plotly.relayout($('scatter'), {selections: []})).catch(() => null);
      P.brushes = {}; P.lasso = null;
      $('status').textContent = '';
      await relink().catch(fail);
    };
    $('scatter').on('plotly_selected', ev => {
      const t = byId($('table').value), picked = new Set();
      for (const p of (ev && ev.points) || []) if (traceTable(p.data) === t.id) picked.add(p.data.customdata[p.pointIndex][0]);
      P.lasso = ev && ev.points ? picked : null;
      P.lassoVersion++;
      $('status').textContent = P.lasso ? `${picked.size} networks of ${tableLabel(t)} in the box or lasso: the Networks tab lists them` : '';
      relink().catch(fail);
    });
    $('scatter').on('plotly_afterplot', drawMarks);  // zoomed, panned, resized, redrawn: the marks follow
    $('scatter').on('plotly_deselect', () => {
      P.lasso = null;
      $('status').textContent = '';
      relink().catch(fail);
    });
  }
  function moveLinked(where) {  // the parallel coordinates above the scatter or above the networks table
    const box = $('linked');
    if (where === 'networks') $('nlinked').appendChild(box);
    else if (box.parentElement !== $('tab-scatter')) $('tab-scatter').insertBefore(box, $('scatter'));
    if (P.view && $('pshow').checked) P.view.resize();
    if (where === 'scatter') drawMarks();  // a selection made on the networks tab, on the scatter now shown
  }
