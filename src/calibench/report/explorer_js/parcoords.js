  // ------------------------------------------------------------ parallel coordinates on a 2D canvas
  // Lines on one canvas, axes, ticks and brushes in SVG above it. A brush (drag along an axis; shift adds
  // a range, a click without a drag removes the range under it or the axis's ranges) is reported to
  // ``onBrush`` on release: nothing else is redrawn, so a brush costs the page's code and this canvas
  // only (plotly's WebGL parcoords redrew for 100-400 ms after each brush on a CPU's WebGL).
  const SVG = 'http://www.w3.org/2000/svg';
  // plotly's named colour scales (their stops), so lines and points share one scale
  const SCALES = {
    Viridis: [[0, '#440154'], [0.0627, '#48186a'], [0.1255, '#472d7b'], [0.1882, '#424086'], [0.251, '#3b528b'],
      [0.3137, '#33638d'], [0.3765, '#2c728e'], [0.4392, '#26828e'], [0.502, '#21918c'], [0.5647, '#1fa088'],
      [0.6275, '#28ae80'], [0.6902, '#3fbc73'], [0.7529, '#5ec962'], [0.8157, '#84d44b'], [0.8784, '#addc30'],
      [0.9412, '#d8e219'], [1, '#fde725']],
    RdBu: [[0, 'rgb(5,10,172)'], [0.35, 'rgb(106,137,247)'], [0.5, 'rgb(190,190,190)'], [0.6, 'rgb(220,170,132)'],
      [0.7, 'rgb(230,145,90)'], [1, 'rgb(178,10,28)']],
  };
  function rgbOf(text) {  // '#rrggbb' or 'rgb(r, g, b)' or 'rgba(...)' -> [r, g, b]
    if (text[0] === '#') return [1, 3, 5].map(k => parseInt(text.slice(k, k + 2), 16));
    return text.replace(/[^\d.,]/g, '').split(',').slice(0, 3).map(Number);
  }
  // the colour at t in [0, 1] of a scale ([[stop, colour], ...], or a name of SCALES), linear between stops
  function scaleColour(scale, t) {
    const stops = typeof scale === 'string' ? SCALES[scale] : scale;
    t = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0));
    let k = 1;
    while (k < stops.length - 1 && stops[k][0] < t) k++;
    const [s0, c0] = stops[k - 1], [s1, c1] = stops[k], f = s1 > s0 ? (t - s0) / (s1 - s0) : 0;
    const a = rgbOf(c0), b = rgbOf(c1);
    return `rgb(${a.map((v, i) => Math.round(v + (b[i] - v) * f)).join(',')})`;
  }
  function niceTicks(lo, hi, most = 6) {  // round values in [lo, hi], at most about ``most`` of them
    const span = hi - lo;
    if (!(span > 0)) return [lo];
    const raw = span / most, p = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map(m => m * p).find(s => span / s <= most) || 10 * p;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }
  function svgEl(parent, tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
    return e;
  }
  // A parallel-coordinates view in ``el``. ``draw(spec)``: spec.axes [{name, values, cats, range}] (values: one
  // per line; range: [lo, hi] of the axis, else the values'), spec.colours (a CSS colour per line, or one for all), spec.brushes {name: [[lo, hi], ...]},
  // spec.colourbar {title, scale, lo, hi} or null, spec.note; ``onBrush(name, ranges)`` on every brush,
  // ``onReorder(names)`` when an axis's name is dragged to another place.
  function makeParcoords(el, onBrush, onReorder) {
    const M = {l: 70, r: 90, t: 56, b: 30};
    const view = {spec: null, geometry: null, drawing: null};
    el.innerHTML = '';
    el.style.position = 'relative';
    const canvas = document.createElement('canvas');
    canvas.style.cssText = 'position:absolute;left:0;top:0';
    const svg = document.createElementNS(SVG, 'svg');
    svg.style.cssText = 'position:absolute;left:0;top:0;overflow:visible;user-select:none';
    el.append(canvas, svg);
    function geometry() {
      const w = Math.max(200, el.clientWidth), h = Math.max(120, el.clientHeight), axes = view.spec.axes;
      const x = axes.map((_, k) => axes.length === 1 ? (M.l + w - M.r) / 2 : M.l + k * (w - M.l - M.r) / (axes.length - 1));
      const ranges = axes.map(a => {
        if (a.cats) return [0, Math.max(1, a.cats.length - 1)];
        let [lo, hi] = a.range || [Infinity, -Infinity];
        if (!a.range) for (const v of a.values) if (Number.isFinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
        if (!(lo <= hi)) return [0, 1];
        return lo === hi ? [lo - 0.5, hi + 0.5] : [lo, hi];
      });
      return {w, h, x, ranges, top: M.t, bottom: h - M.b};
    }
    const yOf = (g, k, v) => g.bottom - (v - g.ranges[k][0]) / (g.ranges[k][1] - g.ranges[k][0]) * (g.bottom - g.top);
    const valueOf = (g, k, y) => g.ranges[k][0] + (g.bottom - y) / (g.bottom - g.top) * (g.ranges[k][1] - g.ranges[k][0]);
    function inside(i) {  // line i within every brushed axis's ranges
      const {axes, brushes} = view.spec;
      for (const a of axes) {
        const rs = brushes[a.name];
        if (rs && rs.length && !rs.some(([lo, hi]) => a.values[i] >= lo && a.values[i] <= hi)) return false;
      }
      return true;
    }
    function drawLines(g) {
      const dpr = window.devicePixelRatio || 1, {axes, colours} = view.spec, n = axes.length ? axes[0].values.length : 0;
      canvas.width = Math.round(g.w * dpr); canvas.height = Math.round(g.h * dpr);
      canvas.style.width = g.w + 'px'; canvas.style.height = g.h + 'px';
      const ctx = canvas.getContext('2d');
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, g.w, g.h);
      if (axes.length < 2) return;
      const brushed = axes.some(a => (view.spec.brushes[a.name] || []).length);
      const groups = new Map(), context = [];  // lines by colour (one path each), and the lines outside the brushes
      for (let i = 0; i < n; i++) {
        if (brushed && !inside(i)) { context.push(i); continue; }
        const c = typeof colours === 'string' ? colours : colours[i];
        if (!groups.has(c)) groups.set(c, []);
        groups.get(c).push(i);
      }
      const ys = axes.map((a, k) => i => yOf(g, k, a.values[i]));
      const stroke = (lines, style, alpha) => {
        ctx.beginPath();
        for (const i of lines) {
          ctx.moveTo(g.x[0], ys[0](i));
          for (let k = 1; k < axes.length; k++) ctx.lineTo(g.x[k], ys[k](i));
        }
        ctx.strokeStyle = style; ctx.globalAlpha = alpha; ctx.lineWidth = 1; ctx.stroke();
      };
      if (context.length) stroke(context, '#888', 0.05);
      const shown = n - context.length, alpha = shown > 500 ? 0.35 : shown > 50 ? 0.6 : 0.9;
      for (const [c, lines] of groups) stroke(lines, c, alpha);
      ctx.globalAlpha = 1;
    }
    function drawAxes(g) {
      svg.setAttribute('width', g.w); svg.setAttribute('height', g.h);
      svg.innerHTML = '';
      const {axes, brushes, colourbar, note} = view.spec;
      axes.forEach((a, k) => {
        const x = g.x[k], axis = svgEl(svg, 'g', {class: 'axis', 'data-name': a.name, 'data-range': g.ranges[k].join(',')});
        svgEl(axis, 'line', {x1: x, x2: x, y1: g.top, y2: g.bottom, stroke: '#444', 'stroke-width': 1});
        const ticks = a.cats ? a.cats.map((c, v) => [v, c]) : niceTicks(g.ranges[k][0], g.ranges[k][1]).map(v => [v, fmt(v)]);
        for (const [v, label] of ticks) {
          const y = yOf(g, k, v);
          svgEl(axis, 'line', {x1: x - 4, x2: x, y1: y, y2: y, stroke: '#444'});
          svgEl(axis, 'text', {x: x - 6, y: y + 3.5, 'text-anchor': 'end', 'font-size': 10, fill: '#333'}, label);
        }
        svgEl(axis, 'text', {x, y: g.top - 12, 'text-anchor': 'start', 'font-size': 11, fill: '#222', class: 'axis-title',
                             'data-axis': k, style: 'cursor: move', transform: `rotate(-12 ${x} ${g.top - 12})`}, a.name);
        for (const [lo, hi] of brushes[a.name] || []) {
          const y0 = yOf(g, k, Math.min(hi, g.ranges[k][1])), y1 = yOf(g, k, Math.max(lo, g.ranges[k][0]));
          if (y1 >= y0) svgEl(axis, 'rect', {class: 'range', x: x - 7, width: 14, y: y0, height: Math.max(2, y1 - y0),
                                             fill: '#c44e52', 'fill-opacity': 0.25, stroke: '#c44e52'});
        }
        const hit = svgEl(svg, 'g', {class: 'axis-brush', 'data-axis': k});
        svgEl(hit, 'rect', {x: x - 12, width: 24, y: g.top - 4, height: g.bottom - g.top + 8, fill: 'transparent',
                            style: 'cursor: crosshair'});
      });
      if (colourbar) {
        const x = g.w - M.r + 28, steps = 32, id = 'pcgrad';
        const grad = svgEl(svgEl(svg, 'defs', {}), 'linearGradient', {id, x1: 0, x2: 0, y1: 1, y2: 0});
        for (let s = 0; s <= steps; s++) {
          svgEl(grad, 'stop', {offset: s / steps, 'stop-color': scaleColour(colourbar.scale, s / steps)});
        }
        svgEl(svg, 'rect', {x, y: g.top, width: 12, height: g.bottom - g.top, fill: `url(#${id})`});
        for (const [v, y] of [[colourbar.hi, g.top + 4], [colourbar.lo, g.bottom]]) {
          svgEl(svg, 'text', {x: x + 15, y, 'font-size': 10, fill: '#333'}, fmt(v));
        }
        const cy = (g.top + g.bottom) / 2;
        svgEl(svg, 'text', {x: x + 50, y: cy, 'font-size': 11, fill: '#222', 'text-anchor': 'middle',
                            transform: `rotate(90 ${x + 50} ${cy})`}, colourbar.title);
      }
      if (note) svgEl(svg, 'text', {x: 0, y: g.h - 6, 'font-size': 11, fill: '#555', class: 'note'}, note);
    }
    function draw(spec) {
      view.spec = spec;
      view.geometry = geometry();
      drawLines(view.geometry);
      drawAxes(view.geometry);
    }
    function axisAt(ev) {  // the axis under the pointer (its index) and the pointer's y in the plot
      const box = svg.getBoundingClientRect(), g = view.geometry;
      const x = ev.clientX - box.left, y = ev.clientY - box.top;
      let best = -1;
      g.x.forEach((ax, k) => { if (Math.abs(ax - x) <= 12 && (best < 0 || Math.abs(ax - x) < Math.abs(g.x[best] - x))) best = k; });
      return best >= 0 && y >= g.top - 4 && y <= g.bottom + 4 ? [best, Math.min(g.bottom, Math.max(g.top, y))] : [-1, y];
    }
    function dragTitle(ev, k) {  // an axis's name dragged sideways: the axes in their new order
      const box = svg.getBoundingClientRect(), g = view.geometry;
      const up = e => {
        window.removeEventListener('mouseup', up, true);
        const x = e.clientX - box.left;
        let to = 0;
        g.x.forEach((ax, j) => { if (Math.abs(ax - x) < Math.abs(g.x[to] - x)) to = j; });
        if (to === k) return;
        const names = view.spec.axes.map(a => a.name), [moved] = names.splice(k, 1);
        names.splice(to, 0, moved);
        onReorder(names);
      };
      ev.preventDefault();
      window.addEventListener('mouseup', up, true);
    }
    svg.addEventListener('mousedown', ev => {
      if (!view.spec || ev.button !== 0) return;
      if (ev.target.classList && ev.target.classList.contains('axis-title')) return dragTitle(ev, Number(ev.target.dataset.axis));
      const [k, y0] = axisAt(ev);
      if (k < 0) return;
      ev.preventDefault();
      const g = view.geometry, x = g.x[k], box = svg.getBoundingClientRect();
      const band = svgEl(svg, 'rect', {x: x - 7, width: 14, y: y0, height: 0, fill: '#c44e52', 'fill-opacity': 0.2,
                                       stroke: '#c44e52', 'stroke-dasharray': '3 2'});
      let y1 = y0;
      const move = e => {
        y1 = Math.min(g.bottom, Math.max(g.top, e.clientY - box.top));
        band.setAttribute('y', Math.min(y0, y1)); band.setAttribute('height', Math.abs(y1 - y0));
      };
      const up = e => {
        window.removeEventListener('mousemove', move, true);
        window.removeEventListener('mouseup', up, true);
        move(e);
        const a = view.spec.axes[k], kept = (view.spec.brushes[a.name] || []).slice();
        let ranges;
        if (Math.abs(y1 - y0) < 3) {  // a click: off with the range under it, or with every range of the axis
          const v = valueOf(g, k, y0), hit = kept.findIndex(([lo, hi]) => v >= lo && v <= hi);
          ranges = hit >= 0 ? kept.filter((_, j) => j !== hit) : [];
        } else {
          const lo = valueOf(g, k, Math.max(y0, y1)), hi = valueOf(g, k, Math.min(y0, y1));
          ranges = [...(e.shiftKey ? kept : []), [lo, hi]];
        }
        view.spec.brushes = {...view.spec.brushes, [a.name]: ranges};
        if (!ranges.length) delete view.spec.brushes[a.name];
        draw(view.spec);
        onBrush(a.name, ranges);
      };
      window.addEventListener('mousemove', move, true);
      window.addEventListener('mouseup', up, true);
    });
    window.addEventListener('resize', () => { if (view.spec && el.clientWidth) draw(view.spec); });
    return {draw, resize: () => { if (view.spec) draw(view.spec); }, view};
  }
