  // ------------------------------------------------------------ one network
  async function showNetwork(t, row) {
    const r = await rows(t);
    S.selected = null;
    Plotly.purge($('reliability'));
    $('reliability').dataset.stages = '';
    const wanted = ['accuracy', 'params', 'flops', S.scatter.x, S.scatter.y, S.scatter.color];
    const bins = t.bins.includes(15) ? 15 : t.bins[0];  // none when the page holds no binned metric of the table
    for (const s of t.stages) wanted.push(`${s}_accuracy`, ...(bins ? [`${s}_ece_${bins}`] : []), `${s}_nll`, `${s}_brier`);
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
