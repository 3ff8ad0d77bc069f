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
