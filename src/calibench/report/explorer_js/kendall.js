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
