// calibench explorer: the page's code (calibench/report/explorer.py writes the data it reads).
// Data files are scripts that call CB.<kind>(...); they are loaded when the page needs them.
'use strict';

const CB = (() => {
  const waiting = new Map();   // file -> resolve, while its script loads
  const loaded = new Map();    // file -> promise of its payload
  const columns = new Map();   // table id + column -> Float64Array over the table's rows
  const S = {manifest: null, tables: {}, painted: null, errors: [], scatter: null, selected: null, firstPaint: {}};
  // the first frame after a plot's first draw, per plot (for the benchmark: scatter, parallel coordinates)
  const stamp = name => { if (!S.firstPaint[name]) requestAnimationFrame(() => { S.firstPaint[name] = S.firstPaint[name] || performance.now(); }); };

  // ------------------------------------------------------------ loading data files
  function load(file) {
    if (loaded.has(file)) return loaded.get(file);
    const promise = new Promise((resolve, reject) => {
      waiting.set(file, resolve);
      const s = document.createElement('script');
      s.charset = 'x-user-defined';  // bytes 0x80-0xFF arrive as U+F780-U+F7FF: their low byte is the byte
      s.src = 'data/' + file;
      s.onload = () => {
        if (waiting.has(file)) { waiting.delete(file); reject(new Error('data/' + file + ' did not deliver its data')); }
      };
      s.onerror = () => { waiting.delete(file); reject(new Error('could not load data/' + file)); };
      document.head.appendChild(s);
    });
    loaded.set(file, promise);
    promise.catch(() => loaded.delete(file));
    return promise;
  }
  function deliver(file, value) {
    const resolve = waiting.get(file);
    if (resolve) { waiting.delete(file); resolve(value); }
  }
  async function gunzip(text, length, file) {
    if (text.length !== length) {
      throw new Error(`data/${file}: ${text.length} bytes where ${length} were written (was it read with another charset?)`);
    }
    const bytes = new Uint8Array(length);
    for (let i = 0; i < length; i++) bytes[i] = text.charCodeAt(i) & 0xff;
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  // float16 bit patterns -> numbers, once
  const HALF = (() => {
    const t = new Float64Array(65536);
    for (let h = 0; h < 65536; h++) {
      const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
      t[h] = e === 0 ? s * m * 2 ** -24 : e === 31 ? (m ? NaN : s * Infinity) : s * (1 + m / 1024) * 2 ** (e - 15);
    }
    return t;
  })();

  async function rows(t) {
    if (S.tables[t.id]) return S.tables[t.id];
    const bytes = await load(`${t.id}/rows.js`);
    const n = t.n, view = new DataView(bytes.buffer);
    const index = new Int32Array(n), rep = new Int32Array(n);
    for (let i = 0; i < n; i++) { index[i] = view.getInt32(4 * i, true); rep[i] = view.getInt32(4 * (n + i), true); }
    const isRep = new Uint8Array(n);  // the rows measured themselves (a TSS class's representative)
    for (let m = 0; m < t.n_measured; m++) isRep[view.getInt32(4 * (2 * n + m), true)] = 1;
    const names = new TextDecoder().decode(bytes.subarray(4 * (2 * n + t.n_measured))).split('\n');
    const byIndex = new Map();
    for (let i = 0; i < n; i++) byIndex.set(index[i], i);
    S.tables[t.id] = {index, rep, isRep, names, byIndex};
    return S.tables[t.id];
  }

  async function column(t, name) {
    const key = t.id + '\u0000' + name;
    if (columns.has(key)) return columns.get(key);
    const c = t.columns.find(c => c.name === name);
    if (!c) return null;
    const [r, bytes] = await Promise.all([rows(t), load(`${t.id}/${c.file}.js`)]);
    const m = t.n_measured, measured = new Float64Array(m);
    if (c.enc === 'cat') {  // uint16 codes into c.categories; 0xFFFF: no category
      const view = new DataView(bytes.buffer);
      for (let i = 0; i < m; i++) { const code = view.getUint16(2 * i, true); measured[i] = code === 0xffff ? NaN : code; }
    } else if (c.enc === 'f32') {
      const view = new DataView(bytes.buffer);
      for (let i = 0; i < m; i++) measured[i] = view.getFloat32(4 * i, true);
    } else {
      const scale = 2 ** c.exp;
      for (let i = 0; i < m; i++) measured[i] = HALF[bytes[i] | (bytes[m + i] << 8)] * scale;
    }
    const out = new Float64Array(t.n);
    for (let i = 0; i < t.n; i++) out[i] = measured[r.rep[i]];
    columns.set(key, out);
    return out;
  }

  // the table row that was measured for row i (TSS: its isomorphism class's representative)
  function copiesOf(r) {  // representative's row -> the rows of its isomorph copies
    if (!r.copies) {
      r.copies = new Map();
      for (let j = 0; j < r.rep.length; j++) {
        if (r.isRep[j]) continue;
        const i = repRow(r, j);
        if (!r.copies.has(i)) r.copies.set(i, []);
        r.copies.get(i).push(j);
      }
    }
    return r.copies;
  }
  function listed(values, most = 8) {
    return values.slice(0, most).join(', ') + (values.length > most ? ` and ${values.length - most} more` : '');
  }
  function repRow(r, i) {
    if (!r.repRows) {
      r.repRows = new Int32Array(r.rep.length).fill(-1);
      const first = new Map();
      for (let j = 0; j < r.rep.length; j++) if (r.isRep[j]) first.set(r.rep[j], j);
      for (let j = 0; j < r.rep.length; j++) r.repRows[j] = first.get(r.rep[j]);
    }
    return r.repRows[i];
  }

  // ------------------------------------------------------------ helpers
  const $ = id => document.getElementById(id);
  const fmt = v => v === null || v === undefined || Number.isNaN(v) ? 'NaN' : !Number.isFinite(v) ? (v > 0 ? '+inf' : '-inf')
    : Math.abs(v) >= 1e5 ? v.toExponential(2) : Number(v.toPrecision(3)).toString();
  const tableLabel = t => `${t.space}${t.hp ? ' hp ' + t.hp : ''} · ${t.dataset}`;
  const categoriesOf = (t, name) => { const c = t.columns.find(c => c.name === name); return c && c.enc === 'cat' ? c.categories : null; };
  const valueText = (cats, v) => cats ? (Number.isNaN(v) ? '' : cats[v]) : fmt(v);  // a value as the page writes it
  // the table a scatter trace draws (a categorical colour draws one trace per table and category)
  const traceTable = tr => tr.meta || tr.name;
  const PALETTE = ['#4c72b0', '#dd8452', '#55a868', '#c44e52', '#8172b3', '#937860', '#da8bc3', '#8c8c8c', '#ccb974',
                   '#64b5cd', '#1f3b73', '#a0522d', '#2e8b57', '#b22222', '#4b0082', '#808000'];
  const byId = id => S.manifest.tables.find(t => t.id === id);
  const B_RUN = ' [B]', DIFF = ' [B-A]';  // run B's column and B - A, beside run A's (explorer.py's suffixes)
  function fail(err) {
    const text = String(err && err.message || err);
    S.errors.push(text);
    $('error').textContent = 'explorer: ' + S.errors.join('\n');
    console.error('explorer:', text);  // eslint-disable-line no-console
  }
  function options(select, items, selected) {
    select.innerHTML = '';
    const groups = new Map();
    for (const it of items) {
      const o = document.createElement('option');
      o.value = it.value; o.textContent = it.label || it.value;
      if (it.group) {
        if (!groups.has(it.group)) {
          const g = document.createElement('optgroup'); g.label = it.group; groups.set(it.group, g); select.appendChild(g);
        }
        groups.get(it.group).appendChild(o);
      } else select.appendChild(o);
    }
    if (selected !== undefined && items.some(it => String(it.value) === String(selected))) select.value = selected;
  }
  // a column's place in the lists: a stage's metric over its bin counts ("pre · ece by bins", options
  // pre_ece_5 ... pre_ece_500), a stage's unbinned metrics ("pre · unbinned"), or its group (network, ...)
  function columnParts(c) {
    if (!S.manifest.tables.some(t => t.stages.includes(c.group)) || !c.name.startsWith(c.group + '_')) {
      return {group: c.group};
    }
    const rest = c.name.slice(c.group.length + 1), b = /_(\d+)$/.exec(rest);
    return b ? {group: `${c.group} · ${rest.slice(0, -b[0].length)} by bins`, stage: c.group,
                metric: rest.slice(0, -b[0].length), bins: b[1]}
      : {group: `${c.group} · unbinned`, stage: c.group, metric: rest};
  }
  const columnItems = t => t.columns.map(c => ({value: c.name, ...columnParts(c)}));
  // an "add" list: the table's columns the filter keeps, less those already ``taken``
  const addChoices = (select, t, taken) => options(select, columnFilter(columnItems(t)).filter(i => !taken.includes(i.value)));
  // the column filter: every word typed is in the column's name (e.g. "cwce_em 15"), and stage:, metric:
  // and bins: words name exactly ("stage:pre metric:ece bins:15" is pre_ece_15 alone)
  function columnFilter(items) {
    const words = $('colfilter').value.toLowerCase().split(/\s+/).filter(Boolean);
    const exact = w => /^(stage|metric|bins):/.exec(w);
    return words.length ? items.filter(i => words.every(w => {
      const m = exact(w);
      return m ? String(i[m[1]] ?? '').toLowerCase() === w.slice(m[0].length) : i.value.toLowerCase().includes(w);
    })) : items;
  }

  // ------------------------------------------------------------ the scatter
  function scatterTables() {
    const t = byId($('table').value);
    return $('alldatasets').checked ? S.manifest.tables.filter(u => u.space === t.space && u.hp === t.hp) : [t];
  }
  async function drawScatter() {  // the scatter, then the parallel coordinates and the selection on it
    S.drawing = (S.drawing || 0) + 1;
    try {
      await drawScatterOnly();
      await drawParcoords();  // its lines coloured as the points
      await applySelection();  // the selection marked on the new points
    } finally {
      S.drawing -= 1;
    }
  }
  async function drawScatterOnly() {
    const [xn, yn, cn] = [$('xcol').value, $('ycol').value, $('ccol').value];
    const tables = scatterTables();
    const traces = [], layout = {margin: {l: 60, r: 20, t: tables.length > 1 ? 50 : 30, b: 50}, showlegend: false, hovermode: 'closest',
                                 grid: {rows: 1, columns: tables.length, pattern: 'independent'}, annotations: []};
    const shown = [], notes = [];
    let crange = null;  // one colour scale over every panel, so one colour bar tells them all
    const ccats = cn ? categoriesOf(tables[0], cn) : null;  // a categorical colour: a trace and legend entry per category
    const diverging = !!cn && cn.endsWith(DIFF);  // run B - run A: a diverging scale, 0 in its middle
    if (cn && !ccats) {
      let lo = Infinity, hi = -Infinity;
      for (const t of tables) {
        const [c, r] = await Promise.all([column(t, cn), rows(t)]);
        if (c) for (let i = 0; i < t.n; i++) if (r.isRep[i] && Number.isFinite(c[i])) { lo = Math.min(lo, c[i]); hi = Math.max(hi, c[i]); }
      }
      const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
      if (lo <= hi) crange = diverging ? [-m, m] : [lo, hi];
    }
    for (const [k, t] of tables.entries()) {
      const r = await rows(t);
      const [x, y, c, acc] = await Promise.all([column(t, xn), column(t, yn), column(t, cn), column(t, 'accuracy')]);
      if (!x || !y) { notes.push(`${tableLabel(t)} has no column ${!x ? xn : yn}`); continue; }
      const idx = [];  // one point per measurement: an isomorph copy repeats its representative's values
      for (let i = 0; i < t.n; i++) if (r.isRep[i] && Number.isFinite(x[i]) && Number.isFinite(y[i])) idx.push(i);
      const ax = k === 0 ? '' : String(k + 1);
      const copies = copiesOf(r);
      const text = idx.map(i => `index ${r.index[i]}` + (copies.has(i) ? `<br>also its isomorphs: ${listed(copies.get(i).map(j => r.index[j]))}` : '')
        + `<br>${r.names[i]}` + (acc && xn !== 'accuracy' && yn !== 'accuracy' ? `<br>accuracy ${fmt(acc[i])}` : ''));
      const size = idx.length > 5000 ? 3 : 7, opacity = idx.length > 5000 ? 0.6 : 0.9;
      const xcats = categoriesOf(t, xn), ycats = categoriesOf(t, yn);
      const hx = xcats ? `${xn} %{customdata[1]}` : `${xn} %{x:.3g}`, hy = ycats ? `${yn} %{customdata[2]}` : `${yn} %{y:.3g}`;
      const custom = list => list.map(i => [i, xcats ? xcats[x[i]] : '', ycats ? ycats[y[i]] : '']);
      if (c && ccats) {
        const groups = new Map(), textOf = new Map(idx.map((i, j) => [i, text[j]]));  // code -> rows
        for (const i of idx) { const g = Number.isNaN(c[i]) ? -1 : c[i]; if (!groups.has(g)) groups.set(g, []); groups.get(g).push(i); }
        for (const g of [...groups.keys()].sort((a, b) => (a < 0) - (b < 0) || a - b)) {
          const members = groups.get(g), label = g < 0 ? '(none)' : ccats[g];
          traces.push({type: 'scattergl', mode: 'markers', name: label, meta: t.id, legendgroup: label,
            showlegend: !traces.some(tr => tr.legendgroup === label), x: members.map(i => x[i]), y: members.map(i => y[i]),
            customdata: custom(members), text: members.map(i => textOf.get(i)), xaxis: 'x' + ax, yaxis: 'y' + ax,
            hovertemplate: `%{text}<br>${hx}<br>${hy}<br>${cn} ${label}<extra></extra>`,
            marker: {size, opacity, color: g < 0 ? '#bbbbbb' : PALETTE[g % PALETTE.length]}});
        }
      } else {
        const cv = c ? idx.map(i => c[i]) : null;
        traces.push({type: 'scattergl', mode: 'markers', name: t.id, meta: t.id, x: idx.map(i => x[i]), y: idx.map(i => y[i]),
          customdata: custom(idx), text: text, xaxis: 'x' + ax, yaxis: 'y' + ax,
          hovertemplate: `%{text}<br>${hx}<br>${hy}` + (cv ? `<br>${cn} %{marker.color:.3g}` : '') + '<extra></extra>',
          marker: {size, opacity, color: cv || '#4c72b0', colorscale: diverging ? 'RdBu' : 'Viridis', showscale: !!cv && k === 0,
                   ...(cv && crange ? {cmin: crange[0], cmax: crange[1]} : {}),
                   colorbar: cv ? {title: {text: cn, side: 'right'}, thickness: 12} : undefined}});
      }
      const catAxis = (cats, title) => cats ? {title: {text: title}, tickvals: cats.map((_, v) => v), ticktext: cats}
                                            : {title: {text: title}};
      layout['xaxis' + ax] = catAxis(xcats, xn); layout['yaxis' + ax] = catAxis(ycats, k === 0 ? yn : '');
      if (yn === xn + B_RUN && idx.length) {  // run A against run B: the line where they are equal
        let lo = Infinity, hi = -Infinity;
        for (const i of idx) { lo = Math.min(lo, x[i], y[i]); hi = Math.max(hi, x[i], y[i]); }
        (layout.shapes = layout.shapes || []).push({type: 'line', xref: 'x' + ax, yref: 'y' + ax, x0: lo, y0: lo, x1: hi, y1: hi,
                                                     line: {dash: 'dot', color: '#888', width: 1}});
      }
      const copied = t.n - t.n_measured;
      const panels = tables.length > 1;  // side by side: the title on two lines, so neighbours do not overlap
      layout.annotations.push({text: `${tableLabel(t)}${panels ? '<br>' : ' '}(n = ${idx.length} of ${t.n_measured} measured`
        + (copied ? `; ${copied} isomorph copies in their hover` : '') + ')', showarrow: false,
        xref: `x${ax} domain`, yref: `y${ax} domain`, x: 0.5, y: panels ? 1.03 : 1.06, yanchor: 'bottom', font: {size: panels ? 11 : 12}});
      shown.push({table: t.id, points: idx.length, measured: t.n_measured, rows: t.n});
      const missing = t.n_measured - idx.length;
      if (missing) notes.push(`${tableLabel(t)}: ${missing} measured networks without a finite ${xn} or ${yn} are not drawn`);
    }
    S.scatter = {x: xn, y: yn, color: cn, tables: shown, crange};
    if (ccats) {  // the legend in a right margin of its own, clear of the vertical toolbar
      layout.showlegend = true;
      layout.legend = {title: {text: cn}, itemsizing: 'constant', x: 1.01, xanchor: 'left', y: 1, yanchor: 'top'};
      layout.margin.r = 60 + 7 * Math.max(cn.length, ...ccats.map(c => c.length + 4));
    }
    layout.modebar = {orientation: 'v'};  // the toolbar beside the panels, never over a title
    $('status').textContent = notes.join(' · ');
    await Plotly.react($('scatter'), traces, layout, {responsive: true, displaylogo: false});
    P.marked = false;  // new traces: no point marked
    stamp('scatter');
    S.selected = null;
    setHash({t: $('table').value, x: xn, y: yn, c: cn, a: $('alldatasets').checked ? 1 : null});
  }

  function highlight(curve, point) {
    const gd = $('scatter'), tr = gd.data[curve];
    const update = {type: 'scattergl', mode: 'markers', x: [tr.x[point]], y: [tr.y[point]], xaxis: tr.xaxis, yaxis: tr.yaxis,
      hoverinfo: 'skip', marker: {size: 16, color: 'rgba(0,0,0,0)', line: {color: '#e00', width: 3}}, name: 'selected'};
    const old = gd.data.findIndex(d => d.name === 'selected');
    if (old >= 0) Plotly.deleteTraces(gd, old);
    Plotly.addTraces(gd, update);
  }

  async function search() {
    const q = $('search').value.trim();
    if (!q) return;
    const gd = $('scatter');
    for (const [curve, tr] of gd.data.entries()) {
      if (tr.name === 'selected') continue;
      const t = byId(traceTable(tr)), r = await rows(t);
      let row = /^\d+$/.test(q) ? r.byIndex.get(Number(q)) : r.names.indexOf(q);
      if (row === undefined || row < 0) row = /^\d+$/.test(q) ? -1 : r.names.findIndex(s => s.includes(q));
      const asked = row;  // an isomorph copy is drawn as the point of its representative
      if (row >= 0 && !r.isRep[row]) row = repRow(r, row);
      const point = row >= 0 ? tr.customdata.findIndex(d => d[0] === row) : -1;
      if (point >= 0) {
        highlight(curve, point);
        $('status').textContent = `found ${q}: index ${r.index[asked]} in ${tableLabel(t)}`
          + (asked !== row ? ` (an isomorph copy, measured as index ${r.index[row]})` : '');
        await showNetwork(t, asked);
        return;
      }
    }
    $('status').textContent = `no architecture matches "${q}" among the points drawn`;
  }

  // ------------------------------------------------------------ one network
  async function showNetwork(t, row) {
    const r = await rows(t);
    S.selected = null;
    Plotly.purge($('reliability'));
    $('reliability').dataset.stages = '';
    const wanted = ['accuracy', 'params', 'flops', S.scatter.x, S.scatter.y, S.scatter.color];
    const bins = t.bins.includes(15) ? 15 : t.bins[0];
    for (const s of t.stages) wanted.push(`${s}_accuracy`, `${s}_ece_${bins}`, `${s}_nll`, `${s}_brier`);
    const names = [...new Set(wanted)].filter(n => t.columns.some(c => c.name === n));
    const values = await Promise.all(names.map(n => column(t, n)));
    const head = [['table', tableLabel(t)], ['index', r.index[row]], ['arch', r.names[row]]];
    if (!r.isRep[row]) head.push(['measured by', `${r.index[repRow(r, row)]} (same isomorphism class)`]);
    else if (copiesOf(r).has(row)) head.push(['isomorph copies', `${listed(copiesOf(r).get(row).map(j => r.index[j]), 20)} (not measured again: this row's values)`]);
    const cells = head.map(([k, v]) => `<tr><td>${k}</td><td class="text">${String(v).replace(/</g, '&lt;')}</td></tr>`)
      .concat(names.map((n, i) => `<tr><td>${n}</td><td class="num">${valueText(categoriesOf(t, n), values[i][row])}</td></tr>`));
    $('row').innerHTML = `<table id="rowtable">${cells.join('')}</table>`
      + `<p><button id="wholerow">the whole row: all ${t.columns.length} columns</button></p>`;
    $('wholerow').onclick = () => wholeRow(t, row).catch(fail);
    S.selected = {table: t.id, row: row, index: r.index[row]};  // its row is shown; its diagrams follow
    setHash({n: `${t.id}:${r.index[row]}`});
    await drawReliability(t, r.rep[row], `${tableLabel(t)}, index ${r.index[row]}`);
  }

  // every column of one row (each column file is loaded once: the whole table, at full size tens of MB)
  async function wholeRow(t, row) {
    $('wholerow').disabled = true;
    $('wholerow').textContent = `loading ${t.columns.length} columns...`;
    const values = await Promise.all(t.columns.map(c => column(t, c.name)));
    const cells = t.columns.map((c, i) => `<tr><td>${c.name}</td><td class="num">${valueText(c.enc === 'cat' ? c.categories : null, values[i][row])}</td></tr>`);
    $('row').insertAdjacentHTML('beforeend', `<div style="max-height:480px;overflow-y:auto">`
      + `<table id="wholerowtable">${cells.join('')}</table></div>`);
    $('wholerow').remove();
  }

  // a block of networks' reliability bins (explorer.py: encode_reliability_block) -> {row: {stage: [counts,
  // mean confidences (null where empty), correct counts]}}
  function decodeReliability(bytes, file) {  // explorer.py's encode_reliability_block (CBR2)
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (String.fromCharCode(...bytes.subarray(0, 4)) !== 'CBR2') throw new Error(`data/${file}: not reliability bins`);
    const width = v.getUint8(4), names = [], out = {}, heads = [];
    let o = 6;
    for (let k = v.getUint8(5); k > 0; k--) {
      const n = v.getUint8(o);
      names.push(String.fromCharCode(...bytes.subarray(o + 1, o + 1 + n)));
      o += 1 + n;
    }
    const networks = v.getUint32(o, true);
    o += 4;
    let total = 0;
    for (let k = 0; k < networks; k++) {
      const row = v.getInt32(o, true), mask = v.getUint16(o + 4, true), stages = [];
      o += 6;
      names.forEach((name, j) => {
        if ((mask >> j) & 1) { stages.push([name, v.getUint16(o, true), total]); total += v.getUint16(o, true); o += 2; }
      });
      heads.push([row, stages]);
    }
    const number = (start, t) => {  // the t-th of the numbers stored as width byte planes from start
      let x = 0;
      for (let j = width - 1; j >= 0; j--) x = x * 256 + bytes[start + j * total + t];
      return x;
    };
    const countsAt = o, residualsAt = o + width * total, placesAt = o + 2 * width * total;
    if (placesAt + total !== bytes.length) throw new Error(`data/${file}: ${bytes.length} bytes where the bins take ${placesAt + total}`);
    for (const [row, stages] of heads) {
      const found = {};
      for (const [name, b, first] of stages) {
        const counts = [], correct = [], conf = [];
        for (let i = 0; i < b; i++) {
          const c = number(countsAt, first + i), q = bytes[placesAt + first + i], z = number(residualsAt, first + i);
          const expected = Math.floor((2 * c * (255 * i + q) + 255 * b) / (2 * 255 * b));
          counts.push(c);
          correct.push(expected + (z % 2 ? -(z + 1) / 2 : z / 2));
          conf.push(c > 0 ? (i + q / 255) / b : null);
        }
        found[name] = [counts, conf, correct];
      }
      out[String(row)] = found;
    }
    return out;
  }

  async function drawReliability(t, measuredRow, title) {
    const block = Math.floor(measuredRow / t.block), el = $('reliability');
    if (!t.rel_blocks.includes(block)) {
      Plotly.purge(el);
      el.innerHTML = '<p class="note">No reliability bins for this network (its shard is not in this results directory).</p>';
      return;
    }
    const found = decodeReliability(await load(`${t.id}/rel${block}.js`), `${t.id}/rel${block}.js`)[String(measuredRow)];
    if (!found) { Plotly.purge(el); el.innerHTML = '<p class="note">No reliability bins for this network.</p>'; return; }
    el.innerHTML = '';
    const stages = t.stages.filter(s => found[s]), cols = Math.min(4, stages.length), nrows = Math.ceil(stages.length / cols);
    const traces = [], layout = {grid: {rows: nrows, columns: cols, pattern: 'independent'}, showlegend: false,
      margin: {l: 40, r: 10, t: 50, b: 30}, title: {text: `Reliability: ${title}`, font: {size: 13}}, annotations: [],
      bargap: 0, barmode: 'overlay'};
    stages.forEach((s, k) => {
      const [count, conf, correct] = found[s], b = count.length, ax = k === 0 ? '' : String(k + 1);
      const acc = count.map((c, i) => c > 0 ? correct[i] / c : null);
      const centre = count.map((_, i) => (i + 0.5) / b), n = count.reduce((a, c) => a + c, 0);
      let ece = 0;
      count.forEach((c, i) => { if (c > 0) ece += c / n * Math.abs(acc[i] - conf[i]); });
      traces.push({type: 'bar', x: centre, y: acc.map(a => a ?? 0), width: 1 / b, marker: {color: '#4c72b0'},
        xaxis: 'x' + ax, yaxis: 'y' + ax, name: 'accuracy', customdata: count,
        hovertemplate: 'bin %{x:.3f}<br>accuracy %{y:.3f}<br>%{customdata} samples<extra></extra>'});
      traces.push({type: 'bar', x: centre, base: acc.map(a => a ?? 0),
        y: count.map((c, i) => c > 0 ? conf[i] - acc[i] : 0), width: 1 / b, xaxis: 'x' + ax, yaxis: 'y' + ax, name: 'gap',
        marker: {color: count.map((c, i) => conf[i] > acc[i] ? 'rgba(221,68,68,0.5)' : 'rgba(240,160,48,0.6)')},
        hovertemplate: 'gap %{y:.3f}<extra></extra>'});
      traces.push({type: 'scatter', mode: 'lines', x: [0, 1], y: [0, 1], xaxis: 'x' + ax, yaxis: 'y' + ax,
        line: {color: 'black', dash: 'dash', width: 1}, hoverinfo: 'skip'});
      layout['xaxis' + ax] = {range: [0, 1], title: {text: 'confidence', font: {size: 10}}};
      layout['yaxis' + ax] = {range: [0, 1]};
      layout.annotations.push({text: `${s}: ECE ${ece.toFixed(3)}`, showarrow: false, xref: `x${ax} domain`,
        yref: `y${ax} domain`, x: 0.5, y: 1.12, font: {size: 11}});
    });
    el.dataset.stages = stages.join(',');
    await Plotly.react(el, traces, layout, {displaylogo: false});
  }

  // ------------------------------------------------------------ networks: a sortable, filterable table
  const ROW_HEIGHT = 21;  // px: a row's 20 and its border's 1 (explorer.html's #nrows td)
  const N = {table: null, columns: [], values: [], cats: [], order: new Int32Array(0), sort: null, selection: null, notes: ''};
  // "accuracy > 0.9, pre_ece_15 <= 0.02, edge_1<-0 = nor_conv_3x3" -> [[column, op, number or category code, as typed]]
  function whereClauses(text, t) {
    const out = [];
    for (const part of text.split(/,|\band\b/).map(s => s.trim()).filter(Boolean)) {
      const m = /^([\w.]+(?:<-\d+)?(?: \[B(?:-A)?\])?)\s*(<=|>=|!=|==|=|<|>)\s*(\S+)$/i.exec(part);
      if (!m) throw new Error(`where: "${part}" is not "column op value" (ops: < <= > >= = !=)`);
      if (!t.columns.some(c => c.name === m[1])) throw new Error(`where: ${tableLabel(t)} has no column ${m[1]}`);
      const cats = categoriesOf(t, m[1]);
      if (cats) {
        if (!['=', '==', '!='].includes(m[2])) throw new Error(`where: ${m[1]} is categorical: = or != only`);
        if (!cats.includes(m[3])) throw new Error(`where: ${m[1]} has no category ${m[3]} (it has ${cats.join(', ')})`);
        out.push([m[1], m[2], cats.indexOf(m[3]), m[3]]);
      } else {
        if (!/^-?[\d.]+(?:e-?\d+)?$/i.test(m[3])) throw new Error(`where: "${m[3]}" is not a number`);
        out.push([m[1], m[2], Number(m[3]), m[3]]);
      }
    }
    return out;
  }
  const OPS = {'<': (a, b) => a < b, '<=': (a, b) => a <= b, '>': (a, b) => a > b, '>=': (a, b) => a >= b,
               '=': (a, b) => a === b, '==': (a, b) => a === b, '!=': (a, b) => a !== b};
  async function networksTab() {
    const t = byId($('table').value);
    if (N.table !== t.id) {
      const d = S.manifest.defaults, wanted = ['accuracy', 'params', 'flops', S.scatter.x, S.scatter.y, S.scatter.color, ...d];
      N.columns = [...new Set(wanted)].filter(n => n && t.columns.some(c => c.name === n));
      N.table = t.id; N.sort = null;
      if (N.selection && N.selection.table !== t.id) N.selection = null;
    }
    addChoices($('naddcol'), t, N.columns);
    await drawNetworks();
  }
  async function drawNetworks() {
    const t = byId(N.table), r = await rows(t);
    N.values = await Promise.all(N.columns.map(name => column(t, name)));
    N.cats = N.columns.map(name => categoriesOf(t, name));  // a categorical column's names, else null
    let keep;
    try {
      const clauses = whereClauses($('nwhere').value, t);
      const cols = await Promise.all(clauses.map(([name]) => column(t, name)));
      keep = i => clauses.every(([, op, v], k) => OPS[op](cols[k][i], v));
      N.notes = clauses.length ? `where ${clauses.map(([c, op, , typed]) => `${c} ${op} ${typed}`).join(', ')}` : '';
    } catch (err) {
      keep = () => true;
      N.notes = String(err.message || err);
    }
    const chosen = [];
    for (let i = 0; i < t.n; i++) if ((!N.selection || N.selection.rows.has(i)) && keep(i)) chosen.push(i);
    if (N.sort) {
      const v = N.values[N.columns.indexOf(N.sort.column)] || null, sign = N.sort.descending ? -1 : 1;
      const key = N.sort.column === 'index' ? i => r.index[i] : N.sort.column === 'arch' ? null : i => v[i];
      chosen.sort((a, b) => {
        if (key === null) return sign * (r.names[a] < r.names[b] ? -1 : r.names[a] > r.names[b] ? 1 : 0) || a - b;
        const x = key(a), y = key(b), xn = Number.isNaN(x), yn = Number.isNaN(y);
        if (xn || yn) return xn - yn || a - b;  // NaN last, either way
        return sign * (x - y) || a - b;
      });
    }
    N.order = Int32Array.from(chosen);
    setHash({nc: N.columns.join(','), w: $('nwhere').value.trim(), s: N.sort ? N.sort.column + (N.sort.descending ? '-' : '') : null});
    $('ncount').textContent = `${N.order.length} of ${t.n} networks` + (N.selection ? ` (the ${N.selection.rows.size} selected by the brushes or the scatter's box or lasso; `
      + '"clear the selection" restores)' : '') + (N.notes ? ` · ${N.notes}` : '');
    const head = ['index', 'arch', ...N.columns].map(name => {
      const mark = N.sort && N.sort.column === name ? (N.sort.descending ? ' ▼' : ' ▲') : '';
      return `<td data-col="${name}"${name === 'arch' ? ' class="wide"' : ''} title="${name}">${name}${mark}</td>`;
    });
    $('nhead').innerHTML = `<table><tr>${head.join('')}</tr></table>`;
    $('nspacer').style.height = `${N.order.length * ROW_HEIGHT}px`;
    renderNetworkRows();
  }
  function renderNetworkRows() {
    const t = byId(N.table), r = S.tables[t.id], body = $('nbody');
    const first = Math.floor(body.scrollTop / ROW_HEIGHT), count = Math.ceil(body.clientHeight / ROW_HEIGHT) + 2;
    const html = [];
    for (let k = first; k < Math.min(N.order.length, first + count); k++) {
      const i = N.order[k], on = S.selected && S.selected.table === t.id && S.selected.row === i ? ' class="on"' : '';
      const cells = N.values.map((v, k) => `<td>${v ? valueText(N.cats[k], v[i]) : ''}</td>`).join('');
      html.push(`<tr data-row="${i}"${on}><td>${r.index[i]}</td><td class="wide">${r.names[i].replace(/</g, '&lt;')}</td>${cells}</tr>`);
    }
    $('nrows').style.top = `${first * ROW_HEIGHT}px`;
    $('nrows').innerHTML = html.join('');
  }
  function networksCsv() {  // the rows shown, in their order, with the columns shown
    const t = byId(N.table), r = S.tables[t.id], quote = s => `"${String(s).replace(/"/g, '""')}"`;
    const lines = [['arch_index', 'arch_str', ...N.columns].join(',')];
    for (const i of N.order) lines.push([r.index[i], quote(r.names[i]), ...N.values.map((v, k) => Number.isNaN(v[i]) ? ''
      : N.cats[k] ? quote(N.cats[k][v[i]]) : v[i])].join(','));
    return lines.join('\n') + '\n';
  }
  function networksControls() {
    $('nwhere').onchange = () => drawNetworks().catch(fail);
    $('nbody').onscroll = () => renderNetworkRows();
    $('nhead').onclick = ev => {
      const cell = ev.target.closest('td');
      if (!cell) return;
      const name = cell.dataset.col;
      N.sort = {column: name, descending: N.sort && N.sort.column === name ? !N.sort.descending : name !== 'index' && name !== 'arch'};
      drawNetworks().catch(fail);
    };
    $('nrows').onclick = ev => {
      const tr = ev.target.closest('tr');
      if (!tr) return;
      $('tab-networks').appendChild($('details'));  // the row and reliability diagrams under the table
      showNetwork(byId(N.table), Number(tr.dataset.row)).then(renderNetworkRows).catch(fail);
      renderNetworkRows();
    };
    $('nadd').onclick = () => {
      if ($('naddcol').value && !N.columns.includes($('naddcol').value)) N.columns.push($('naddcol').value);
      networksTab().catch(fail);
    };
    $('ncsv').onclick = () => {
      const a = document.createElement('a');
      a.href = URL.createObjectURL(new Blob([networksCsv()], {type: 'text/csv'}));
      a.download = `${N.table}_networks.csv`;
      a.click();
    };
  }

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

  // ------------------------------------------------------------ Kendall matrices
  let K = null;
  const KDIMS = [['figure', 'figure'], ['table', 'table'], ['metric', 'metric'], ['stage', 'stage'],
                 ['population', 'networks'], ['bins', 'bin count']];
  async function kendallTab() {
    if (!S.manifest.kendall) { $('knote').textContent = 'This run has no analysis/kendall.parquet.'; return; }
    if (!K) {
      const cols = JSON.parse(new TextDecoder().decode(await load('kendall.js')));
      const n = cols.tau.length;
      K = [];
      for (let i = 0; i < n; i++) {
        const o = {};
        for (const name in cols) o[name] = cols[name][i];
        o.table = `${o.space}${o.hp ? ' hp ' + o.hp : ''} · ${o.dataset === '*' ? 'all datasets' : o.dataset}`;
        o.stage = o.stage ?? '-';
        const bin = /_(\d+)$/.exec(o.row) || /_(\d+)$/.exec(o.metric || '');
        o.bins = o.figure === 'metrics' ? (bin ? bin[1] : 'unbinned') : (o.figure === 'pre_post' ? 'all' : (bin ? bin[1] : 'unbinned'));
        K.push(o);
      }
      const box = $('kcontrols');
      for (const [dim, label] of KDIMS) {
        const l = document.createElement('label'); l.textContent = label + ' ';
        const s = document.createElement('select'); s.id = 'k_' + dim; s.onchange = () => drawKendall(dim).catch(fail);
        l.appendChild(s); box.appendChild(l);
      }
    }
    await drawKendall(null);
  }
  async function drawKendall(changed) {
    let rowsK = K;
    let after = changed === null;
    for (const [dim] of KDIMS) {
      const sel = $('k_' + dim);
      const values = [...new Set(rowsK.map(o => String(o[dim])))];
      if (after || !values.includes(sel.value)) options(sel, values.map(v => ({value: v})), sel.value);
      if (dim === changed) after = true;
      rowsK = rowsK.filter(o => String(o[dim]) === sel.value);
    }
    const names = list => [...new Set(list)];
    let rws = rowsK;
    if ($('k_figure').value === 'metrics' && $('k_bins').value !== 'unbinned') {
      const b = '_' + $('k_bins').value, keep = n => n.endsWith(b) || !/_\d+$/.test(n);
      rws = K.filter(o => o.figure === 'metrics' && o.table === $('k_table').value && String(o.stage) === $('k_stage').value
        && String(o.population) === $('k_population').value && keep(o.row) && keep(o.col));
    }
    const rowNames = names(rws.map(o => o.row)), colNames = names(rws.map(o => o.col));
    const z = rowNames.map(() => colNames.map(() => null)), text = rowNames.map(() => colNames.map(() => ''));
    for (const o of rws) {
      const i = rowNames.indexOf(o.row), j = colNames.indexOf(o.col);
      z[i][j] = o.tau;
      text[i][j] = `${o.row} vs ${o.col}<br>tau ${o.tau === null ? 'NaN' : o.tau.toFixed(3)}`
        + (o.lo !== null && o.hi !== null ? ` [${o.lo.toFixed(3)}, ${o.hi.toFixed(3)}]` : '')
        + `<br>n = ${o.n}<br>interval: ${o.interval || 'none (diagonal)'}`;
    }
    const few = S.manifest.min_networks || 0;
    const marked = rws.filter(o => o.row !== o.col && o.n < few);
    $('knote').textContent = `${rws.length} pairs; hover a cell for tau, its interval, n and the interval's kind.`
      + (marked.length ? ` × marks the ${marked.length} cells on fewer than ${few} networks: too few to decide.` : '');
    const traces = [{type: 'heatmap', z, x: colNames, y: rowNames, text, hoverinfo: 'text',
      zmin: -1, zmax: 1, colorscale: 'RdBu', colorbar: {title: {text: 'Kendall tau-b'}}}];
    if (marked.length) traces.push({type: 'scatter', mode: 'markers', name: `n < ${few}`, x: marked.map(o => o.col),
      y: marked.map(o => o.row), hoverinfo: 'skip', marker: {symbol: 'x-thin', size: 10, line: {width: 1.5, color: '#333'}}});
    await Plotly.react($('kendall'), traces,
      {margin: {l: 160, b: 140, t: 20, r: 20}, yaxis: {autorange: 'reversed'}, showlegend: false, modebar: {orientation: 'v'}},
      {displaylogo: false});
  }

  // ------------------------------------------------------------ methods: pre against post
  async function methodsTab() {
    if (!$('mtable').options.length) {
      options($('mtable'), S.manifest.tables.map(t => ({value: t.id, label: tableLabel(t)})));
      $('mtable').onchange = () => methodsMetrics().catch(fail);
      $('mmetric').onchange = () => drawMethods().catch(fail);
      await methodsMetrics();
    } else await drawMethods();
  }
  async function methodsMetrics() {
    const t = byId($('mtable').value);
    const items = t.columns.filter(c => c.group === 'pre' && c.name !== 'pre_accuracy').map(c => ({value: c.name.slice(4)}));
    options($('mmetric'), items, $('mmetric').value || (t.bins.includes(15) ? 'ece_15' : undefined));
    await drawMethods();
  }
  async function drawMethods() {
    const t = byId($('mtable').value), metric = $('mmetric').value;
    const stages = t.stages.filter(s => s !== 'pre' && t.columns.some(c => c.name === `${s}_${metric}`));
    const pre = await column(t, `pre_${metric}`), r = await rows(t);
    const cols = Math.min(4, stages.length), nrows = Math.ceil(stages.length / cols);
    const traces = [], layout = {grid: {rows: nrows, columns: cols, pattern: 'independent'}, showlegend: false,
      margin: {l: 50, r: 10, t: 40, b: 40}, annotations: []};
    for (const [k, s] of stages.entries()) {
      const post = await column(t, `${s}_${metric}`), ax = k === 0 ? '' : String(k + 1), idx = [];
      const little = await column(t, `${s}_fit_underdetermined`);  // 1: fitted on too little data
      for (let i = 0; i < t.n; i++) if (r.isRep[i] && Number.isFinite(pre[i]) && Number.isFinite(post[i])) idx.push(i);
      const xs = idx.map(i => pre[i]), ys = idx.map(i => post[i]);
      const hi = Math.max(...xs, ...ys, 0), lo = Math.min(...xs, ...ys, 0);
      const flagged = idx.map(i => !!little && little[i] === 1), nFlagged = flagged.filter(Boolean).length;
      traces.push({type: 'scattergl', mode: 'markers', x: xs, y: ys, xaxis: 'x' + ax, yaxis: 'y' + ax,
        text: idx.map((i, j) => `index ${r.index[i]}` + (flagged[j] ? '<br>fitted on too little data' : '')),
        hovertemplate: '%{text}<br>pre %{x:.3g}<br>post %{y:.3g}<extra></extra>',
        marker: {size: idx.length > 5000 ? 2 : 6, opacity: 0.6, color: flagged.map(f => f ? '#dd8452' : '#4c72b0'),
                 symbol: flagged.map(f => f ? 'x' : 'circle')}});
      traces.push({type: 'scatter', mode: 'lines', x: [lo, hi], y: [lo, hi], xaxis: 'x' + ax, yaxis: 'y' + ax,
        line: {color: 'black', dash: 'dash', width: 1}, hoverinfo: 'skip'});
      const better = idx.filter(i => post[i] < pre[i]).length;
      layout.annotations.push({text: `${s}: ${better} of ${idx.length} below the line`
        + (nFlagged ? `; ${nFlagged} on too little data (×)` : ''), showarrow: false,
        xref: `x${ax} domain`, yref: `y${ax} domain`, x: 0.5, y: 1.1, font: {size: 11}});
      layout['xaxis' + ax] = {title: {text: `pre ${metric}`, font: {size: 10}}};
    }
    $('mnote').textContent = `${tableLabel(t)}: each measured network's ${metric} before (x) and after (y) each method; `
      + 'below the dashed identity line the method lowered it.';
    layout.modebar = {orientation: 'v'};
    await Plotly.react($('methods'), traces, layout, {displaylogo: false});
  }

  // ------------------------------------------------------------ two runs (calibench explore RUN_A --compare RUN_B)
  const esc = v => String(v).replace(/[&<>"]/g, ch => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[ch]));
  function compareHead() {  // the two runs, the verdict, the settings that differ, the tables of one run only
    const m = S.manifest.compare;
    const settings = m.settings.length
      ? `<details><summary>${m.settings.length} setting${m.settings.length === 1 ? ' differs' : 's differ'}</summary><ul>`
        + m.settings.map(([k, a, b, where]) => `<li><code>${esc(k)}</code>: ${esc(a)} &rarr; ${esc(b)} [${esc(where)}]</li>`).join('')
        + '</ul></details>' : '<p>No setting differs.</p>';
    const one = m.tables_one_run.length ? '<p>Tables of one run only: ' + m.tables_one_run.map(
      ([name, side, n]) => `${esc(name)} (run ${side}, ${n} rows)`).join(', ') + '</p>' : '';
    $('cmphead').innerHTML = `<p><b>A</b> <code>${esc(m.a)}</code> (${esc(m.a_kind)}) against <b>B</b> <code>${esc(m.b)}</code>`
      + ` (${esc(m.b_kind)}); the points are run A's networks.</p><p id="cmpverdict">${esc(m.verdict)}</p>` + settings + one;
  }
  function compareTable() {  // this table: networks in one run only, columns that differ, the compare column's list
    const t = byId($('table').value), c = t.compare;
    if (!c) {
      $('cmptable').textContent = `${tableLabel(t)}: in run A only`;
      options($('cmpcol'), [{value: '', label: '(the table is in run A only)'}]);
      return;
    }
    const keys = (list, n) => list.map(k => k.join('/')).join(', ') + (n > list.length ? ` and ${n - list.length} more` : '');
    $('cmptable').textContent = `${tableLabel(t)}: ${c.n_both} networks in both runs (matched by ${c.key.join(', ')})`
      + (c.n_only_a ? `; only in A (${c.n_only_a}): ${keys(c.only_a, c.n_only_a)}` : '')
      + (c.n_only_b ? `; only in B (${c.n_only_b}, not drawn): ${keys(c.only_b, c.n_only_b)}` : '')
      + `; data columns: ${c.n_differs} differ, ${c.n_equal} equal`
      + (c.only_columns_a.length ? `, ${c.only_columns_a.length} only in A (${listed(c.only_columns_a, 4)})` : '')
      + (c.only_columns_b.length ? `, ${c.only_columns_b.length} only in B (${listed(c.only_columns_b, 4)})` : '');
    const first = c.differs.length ? '(choose a column that differs)' : '(no plotted column differs)';
    options($('cmpcol'), [{value: '', label: first}, ...c.differs.map(name => ({value: name}))], $('xcol').value);
    compareNote();
  }
  function compareNote() {  // calibench compare's figures of the compare column (exact, not the page's 3 digits)
    const t = byId($('table').value), name = $('cmpcol').value, st = t.compare && t.compare.stats[name];
    $('cmpnote').textContent = !st ? '' : `${name}: ${st.n_differ} of ${t.compare.n_both} networks differ`
      + (st.n_nan_mismatch ? ` (${st.n_nan_mismatch} NaN on one side only)` : '')
      + `; largest |B - A| ${fmt(st.max_abs_diff)}, median ${fmt(st.median_abs_diff)}; Kendall tau of A and B ${fmt(st.kendall_tau)}`;
  }
  function compareControls() {
    $('compare').classList.remove('hidden');
    $('reportlink').classList.add('hidden');  // the page is not inside a run: no report beside it
    compareHead();
    compareTable();
    $('cmpcol').onchange = () => {
      const name = $('cmpcol').value;
      if (name) {
        tableChanged({x: name, y: name + B_RUN, c: name + DIFF}, true);
        if (N.table === $('table').value) {  // the networks table, already open on this table, lists them too
          for (const n of [name, name + B_RUN, name + DIFF]) if (!N.columns.includes(n)) N.columns.push(n);
        }
      }
      compareNote();
      drawScatter().catch(fail);
    };
  }

  // ------------------------------------------------------------ start
  // the view in the URL (reopened by start): t table, x y c columns, a all datasets, tab, n selected
  // network (table:index), the networks table's nc columns, w where-clauses, s sort (column, "-" descending),
  // and the parallel coordinates' pa axes and b brushes (column:low:high, ";" between)
  function setHash(values) {
    const hash = new URLSearchParams(location.hash.slice(1));
    for (const [k, v] of Object.entries(values)) {
      if (v === null || v === undefined || v === '') hash.delete(k); else hash.set(k, v);
    }
    history.replaceState(null, '', '#' + hash.toString());
  }
  function tab(name) {
    setHash({tab: name});
    for (const b of document.querySelectorAll('nav button')) b.classList.toggle('on', b.dataset.tab === name);
    for (const s of ['scatter', 'networks', 'kendall', 'methods']) $('tab-' + s).classList.toggle('hidden', s !== name);
    if (name === 'scatter' && $('details').parentElement !== $('tab-scatter')) $('tab-scatter').appendChild($('details'));
    if (name === 'scatter' || name === 'networks') moveLinked(name);
    if (name === 'networks') return networksTab().catch(fail);
    if (name === 'kendall') return kendallTab().catch(fail);
    if (name === 'methods') return methodsTab().catch(fail);
    return Promise.resolve();
  }
  function tableChanged(keep, chosen) {  // chosen: the columns to show (else those shown stay where the table has them)
    const t = byId($('table').value), items = columnItems(t), d = S.manifest.defaults, shown = columnFilter(items);
    const pick = (sel, want) => {
      const value = items.some(i => i.value === sel.value) && keep && !chosen ? sel.value : want;
      // the chosen column stays in its list, whatever the filter: the plot does not change under it
      options(sel, shown.some(i => i.value === value) ? shown : [...items.filter(i => i.value === value), ...shown], value);
    };
    pick($('xcol'), keep && keep.x || d[0]); pick($('ycol'), keep && keep.y || d[1]); pick($('ccol'), keep && keep.c || d[2]);
    $('colcount').textContent = shown.length === items.length ? '' : `${shown.length} of ${items.length} columns`;
  }
  async function start(manifest) {
    S.manifest = manifest;
    $('runname').textContent = manifest.results;
    if (manifest.demo) $('banner').textContent = 'mini benchmark: not NATS-Bench results';
    const hash = new URLSearchParams(location.hash.slice(1));
    options($('table'), manifest.tables.map(t => ({value: t.id, label: tableLabel(t)})), hash.get('t') || undefined);
    tableChanged({x: hash.get('x'), y: hash.get('y'), c: hash.get('c')});
    $('alldatasets').checked = hash.get('a') === '1';
    const redraw = () => drawScatter().catch(fail);
    $('table').onchange = () => {
      P.lasso = null;  // rows of the table it was drawn on
      tableChanged({x: $('xcol').value, y: $('ycol').value, c: $('ccol').value});
      if (manifest.compare) compareTable();
      redraw();
    };
    if (manifest.compare) compareControls();
    for (const id of ['alldatasets', 'xcol', 'ycol', 'ccol']) $(id).onchange = redraw;
    $('colfilter').oninput = () => tableChanged({x: $('xcol').value, y: $('ycol').value, c: $('ccol').value});
    $('searchgo').onclick = () => search().catch(fail);
    $('search').onkeydown = e => { if (e.key === 'Enter') search().catch(fail); };
    for (const b of document.querySelectorAll('nav button')) b.onclick = () => tab(b.dataset.tab);
    if (hash.get('pa')) P.axes = hash.get('pa').split(',');  // the parallel coordinates as the URL left them
    P.brushes = brushesFrom(hash.get('b'));
    await drawScatter();
    networksControls();
    linkedControls();
    const t0 = byId($('table').value);
    if (hash.get('nc')) {  // the networks table as the URL left it
      N.table = t0.id;
      N.columns = hash.get('nc').split(',').filter(n => t0.columns.some(c => c.name === n));
    }
    if (hash.get('w')) $('nwhere').value = hash.get('w');
    const sorted = hash.get('s');
    if (sorted) N.sort = {column: sorted.replace(/-$/, ''), descending: sorted.endsWith('-')};
    if (['networks', 'kendall', 'methods'].includes(hash.get('tab'))) await tab(hash.get('tab'));
    const picked = /^(.+):(-?\d+)$/.exec(hash.get('n') || '');
    if (picked && byId(picked[1])) {  // the network the URL names: its row and reliability diagrams
      const t = byId(picked[1]), r = await rows(t), row = r.byIndex.get(Number(picked[2]));
      if (row !== undefined) {
        if (hash.get('tab') === 'networks') $('tab-networks').appendChild($('details'));
        await showNetwork(t, row);
        if (hash.get('tab') === 'networks') renderNetworkRows();
      }
    }
    $('scatter').on('plotly_click', ev => {
      const p = ev.points && ev.points[0];
      if (!p || p.data.name === 'selected') return;
      highlight(p.curveNumber, p.pointIndex);
      showNetwork(byId(traceTable(p.data)), p.data.customdata[p.pointIndex][0]).catch(fail);
    });
    requestAnimationFrame(() => { S.painted = performance.now(); });
  }

  return {
    state: S, networks: N, linked: P, sampleRows, decodeReliability, networksCsv, column, rows, showNetwork, tab,
    manifest: m => { S.ready = start(m).catch(fail); },
    rowdata: (tid, length, text) => deliver(`${tid}/rows.js`, gunzip(text, length, `${tid}/rows.js`)),
    col: (tid, k, length, text) => deliver(`${tid}/c${k}.js`, gunzip(text, length, `${tid}/c${k}.js`)),
    file: (tid, name, length, text) => deliver(`${tid}/${name}.js`, gunzip(text, length, `${tid}/${name}.js`)),
    rel: (tid, b, length, text) => deliver(`${tid}/rel${b}.js`, gunzip(text, length, `${tid}/rel${b}.js`)),
    kendall: (length, text) => deliver('kendall.js', gunzip(text, length, 'kendall.js')),
  };
})();
