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
  function compareNote() {  // calibench compare's figures of the compare column (from the exact values, not the page's)
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
