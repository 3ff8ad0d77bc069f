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
