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
