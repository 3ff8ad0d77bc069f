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
      crange = colourRange(lo, hi, diverging);
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
    P.marks = null;  // new traces: no point marked (until the selection is applied to them)
    await Plotly.react($('scatter'), traces, layout, {responsive: true, displaylogo: false});
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
