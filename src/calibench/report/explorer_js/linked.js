  // ------------------------------------------------------------ parallel coordinates, brushing, one selection
  // One selection of the table on show, shared by the parallel coordinates, the scatter and the networks
  // table: the rows inside every brushed axis's ranges (a brush: drag along an axis) and, if a box or
  // lasso was drawn on the scatter, inside it. The scatter dims the rest, the networks table lists it.
  const P = {axes: null, brushes: {}, lasso: null, lassoVersion: 0, rows: [], drawn: null, bound: false, updated: null,
             count: null, maxLines: 2000};
  // A seeded sample of at most P.maxLines of the rows ``idx`` (every one when fewer), in their order: a plot
  // of 32,768 lines redraws in seconds on a CPU's WebGL; the brushes still select among every row.
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
    const dims = P.axes.map((name, k) => {
      const cats = categoriesOf(t, name), d = {label: name, values: idx.map(i => values[k][i]), multiselect: true};
      if (cats) Object.assign(d, {tickvals: cats.map((_, v) => v), ticktext: cats, range: [0, Math.max(1, cats.length - 1)]});
      const b = P.brushes[name];
      if (b && b.length) d.constraintrange = b.length === 1 ? b[0] : b;
      return d;
    });
    let line = {color: '#4c72b0'};
    if (P.lasso) {  // the scatter's box or lasso: its networks in red
      line = {color: idx.map(i => P.lasso.has(i) ? 1 : 0), colorscale: [[0, '#c8c8c8'], [1, '#c44e52']], cmin: 0, cmax: 1};
    } else {
      const c = numericColour ? await column(t, numericColour) : null;
      if (c && idx.every(i => Number.isFinite(c[i]))) {
        line = {color: idx.map(i => c[i]), colorscale: cn.endsWith(DIFF) ? 'RdBu' : 'Viridis', showscale: true,
                ...(cn.endsWith(DIFF) ? {cmid: 0} : {}), colorbar: {title: {text: cn, side: 'right'}, thickness: 12}};
      }
    }
    const missing = t.n_measured - finite.length, notes = [];
    if (idx.length < finite.length) notes.push(`lines: a seeded sample of ${idx.length} of the ${finite.length} measured networks `
      + '(a brush selects among every network)');
    if (missing) notes.push(`${missing} measured networks without a finite value on every axis are not drawn`);
    await Plotly.react(el, [{type: 'parcoords', dimensions: dims, line, labelangle: -12,
                             labelfont: {size: 11}, tickfont: {size: 10}}],
      {margin: {l: 70, r: 90, t: 56, b: 24}, annotations: notes.length ? [{text: notes.join('; '), showarrow: false,
        xref: 'paper', yref: 'paper', x: 0, y: -0.08, xanchor: 'left', font: {size: 11, color: '#555'}}] : []},
      {displaylogo: false, responsive: true});
    P.drawn = drawn;
    stamp('parcoords');
    if (!P.bound) { el.on('plotly_restyle', () => brushed().catch(fail)); P.bound = true; }
  }
  async function brushed() {  // a brush moved (or an axis was dragged): read them back from the plot
    const started = performance.now(), dims = $('parcoords').data[0].dimensions;
    P.axes = dims.map(d => d.label);
    P.brushes = {};
    for (const d of dims) {
      let cr = d.constraintrange;
      if (!cr || !cr.length) continue;
      if (!Array.isArray(cr[0])) cr = [cr];
      P.brushes[d.label] = cr.map(([lo, hi]) => [Number(lo), Number(hi)]);
    }
    $('paxes').value = P.axes.join(', ');
    if (P.drawn !== null) {  // the plot shows these brushes and this order already: nothing to redraw for them
      const drawn = JSON.parse(P.drawn);
      [drawn[1], drawn[2]] = [P.axes, brushText()];
      P.drawn = JSON.stringify(drawn);
    }
    await applySelection();
    P.updated = {ms: performance.now() - started, count: P.count};
  }
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
  async function markScatter(t, r, picked) {  // the selection bright, the rest faint (every panel: by arch index)
    const gd = $('scatter'), curves = [], points = [];
    if (!gd.data || (!picked && !P.marked)) return;  // nothing marked, nothing to mark
    const indices = picked ? new Set([...picked].map(i => r.index[i])) : null;
    for (const [curve, tr] of gd.data.entries()) {
      if (tr.name === 'selected' || !tr.customdata) continue;
      const u = byId(traceTable(tr));
      if (!u || u.space !== t.space || u.hp !== t.hp) continue;
      const ru = await rows(u);
      curves.push(curve);
      points.push(picked ? tr.customdata.flatMap((d, j) => (u.id === t.id ? picked.has(d[0]) : indices.has(ru.index[d[0]])) ? [j] : [])
        : null);
    }
    if (curves.length) await Plotly.restyle(gd, {selectedpoints: points, 'unselected.marker.opacity': 0.15}, curves);
    P.marked = !!picked;
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
    if (P.drawn !== null && $('pshow').checked) Plotly.Plots.resize($('parcoords'));
  }
