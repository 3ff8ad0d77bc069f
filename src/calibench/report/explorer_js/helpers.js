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
  // a colour scale's range over values from lo to hi (null if none): a diverging one (run B - run A) is
  // symmetric around 0, so the scale's middle is 'no difference'
  const colourRange = (lo, hi, diverging) => {
    if (!(lo <= hi)) return null;
    const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    return diverging ? [-m, m] : [lo, hi];
  };
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
