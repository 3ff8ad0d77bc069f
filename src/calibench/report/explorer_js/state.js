  // ------------------------------------------------------------ the page's state
  const waiting = new Map();   // file -> resolve, while its script loads
  const loaded = new Map();    // file -> promise of its payload
  const columns = new Map();   // table id + column -> Float64Array over the table's rows
  const S = {manifest: null, tables: {}, painted: null, errors: [], scatter: null, selected: null, firstPaint: {}};
  // the first frame after a plot's first draw, per plot (for the benchmark: scatter, parallel coordinates)
  const stamp = name => { if (!S.firstPaint[name]) requestAnimationFrame(() => { S.firstPaint[name] = S.firstPaint[name] || performance.now(); }); };
