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
    const held = t.table_bins || t.bins, left = held.filter(b => !t.bins.includes(b));
    $('binsnote').textContent = !left.length ? '' : (t.bins.length ? `binned metrics at ${t.bins.join(', ')} bins here; `
      + `at ${left.join(', ')} too in the table` : `no binned metrics here; at ${left.join(', ')} bins in the table`)
      + ' (calibench query; calibench explore --bins all puts them here)';
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

  const EXPORTS = {  // CB: what the data files and the tests call
    state: S, networks: N, linked: P, sampleRows, decodeReliability, networksCsv, column, rows, showNetwork, tab,
    manifest: m => { S.ready = start(m).catch(fail); },
    rowdata: (tid, length, text) => deliver(`${tid}/rows.js`, gunzip(text, length, `${tid}/rows.js`)),
    col: (tid, k, length, text) => deliver(`${tid}/c${k}.js`, gunzip(text, length, `${tid}/c${k}.js`)),
    file: (tid, name, length, text) => deliver(`${tid}/${name}.js`, gunzip(text, length, `${tid}/${name}.js`)),
    rel: (tid, b, length, text) => deliver(`${tid}/rel${b}.js`, gunzip(text, length, `${tid}/rel${b}.js`)),
    kendall: (length, text) => deliver('kendall.js', gunzip(text, length, 'kendall.js')),
  };
