// attnviz page-side drawing: the page keeps the decode's attention rows and draws every
// heatmap on <canvas>. The server sends only what the page lacks (new rows, as float32
// base64) plus the step to show; Back, scrub and layer/head changes redraw from what is here.
// A cell is grey exactly where the recorded mask is True; hover values are computed here.
(() => {
  if (window.AttnViz) return;
  const AV = (window.AttnViz = {});
  const KINDS = ["encoder_self", "decoder_self", "cross"];
  const MASKED = "#c4c4c4"; // plots.MASKED: never a viridis colour
  const OUTLINE = "#e45756"; // plots.HIGHLIGHT
  const STOPS = [[68, 1, 84], [72, 35, 116], [64, 67, 135], [52, 94, 141], [41, 120, 142],
    [32, 144, 140], [34, 167, 132], [68, 190, 112], [121, 209, 81], [189, 222, 38], [253, 231, 37]];
  const LUT = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const x = (i / 255) * (STOPS.length - 1), j = Math.min(Math.floor(x), STOPS.length - 2), f = x - j;
    for (let c = 0; c < 3; c++) LUT[i * 3 + c] = Math.round(STOPS[j][c] * (1 - f) + STOPS[j + 1][c] * f);
  }
  const MASK_RGB = [196, 196, 196];
  const OFF = document.createElement("canvas");
  let S = fresh("");
  let root = null;
  let stale = false; // a render was skipped while the step view was hidden
  const view = {}; // kind -> [layer, head]
  const ui = { fixed: false, modelKind: "cross", lens: "weights" };
  // another lens's matrices of this decode, sent once on request (null: the weights path)
  let LENS = null;
  AV.drawn = { epoch: "", step: -1, t: 0 };
  const FORCE_CSS = `.tokens .tok.forced { text-decoration: underline 2px; text-underline-offset: 3px; box-shadow: inset 0 0 0 2px #7c3aed; }
.av-barrow.av-cand:not(.chosen) { cursor: pointer; border-radius: 3px; }
.av-barrow.av-cand:not(.chosen):hover, .av-barrow.av-cand:not(.chosen):focus { background: rgba(124, 58, 237, 0.14); outline: none; }
.av-barrow.forced { box-shadow: inset 4px 0 0 #7c3aed; }
.av-barrow.forced .av-barfill { background: #7c3aed; }`;

  function fresh(epoch) {
    return { epoch, started: false, have: 0, n: 0, step: 0, tokens: [], prob: [], topk: [], forced: [],
      rows: { decoder_self: [], cross: [] }, enc: [], src: [], pieces: [], unk: [], H: 0,
      layers: {}, expected: null, bos: "<bos>", titles: {}, info: {}, done: false };
  }
  function f32(b64) {
    const bin = atob(b64), u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    return new Float32Array(u8.buffer);
  }
  function bits(s, from, n) {
    const u = new Uint8Array(n);
    for (let i = 0; i < n; i++) u[i] = s.charCodeAt(from + i) === 49 ? 1 : 0;
    return u;
  }

  // -- applying what the server sent ---------------------------------------------------------
  AV.apply = function (p) {
    if (!p || typeof p !== "object") return;
    if (p.lens) return setLens(p.lens);
    if (!p.started) {
      S = fresh(p.epoch || "");
      S.info = p.info || {};
      render();
      if (p.follow) document.querySelector("#follow-btn")?.click();
      return;
    }
    if (p.epoch !== S.epoch || p.full) {
      if (!p.full) return AV.resync();
      S = fresh(p.epoch);
      S.started = true;
      S.H = p.heads; S.layers = p.layers; S.src = p.src; S.pieces = p.pieces; S.unk = p.unk;
      S.bos = p.bos; S.expected = p.expected; S.titles = p.titles;
      const ts = p.src.length;
      S.enc = p.encoder.map((e) => ({ w: f32(e.w), m: bits(e.m, 0, ts * ts) }));
      for (const k of ["decoder_self", "cross"]) S.rows[k] = Array.from({ length: p.layers[k] }, () => []);
      for (const k of KINDS) {
        const v = (p.view || {})[k];
        view[k] = v ? [v[0], v[1]] : [p.layers[k] - 1, "mean"];
      }
    } else if (S.have < p.from) {
      return AV.resync(); // the page lost rows (a dropped event): ask for everything
    }
    const ts = S.src.length, H = S.H;
    for (const k of ["decoder_self", "cross"]) {
      const layers = (p.rows || {})[k];
      if (!layers) continue;
      layers.forEach((lay, l) => {
        const w = f32(lay.w);
        let off = 0, moff = 0;
        for (let pos = p.from; pos < p.n; pos++) {
          const tk = k === "decoder_self" ? pos + 1 : ts;
          S.rows[k][l][pos] = { w: w.subarray(off, off + H * tk), m: bits(lay.m, moff, tk) };
          off += H * tk; moff += tk;
        }
      });
    }
    for (const k of ["decoder_self", "cross"]) S.rows[k].forEach((r) => (r.length = Math.min(r.length, p.n)));
    S.prob.length = S.topk.length = p.from;
    S.prob.push(...(p.prob || [])); S.topk.push(...(p.topk || []));
    S.prob.length = S.topk.length = p.n;
    S.have = p.n; S.n = p.n; S.step = p.step; S.tokens = p.tokens; S.done = p.done; S.forced = p.forced || [];
    S.info = p.info || {}; S.limit = p.limit;
    render();
    if (ui.lens !== "weights" && !lensCovers()) requestLens(); // only off the weights path
    if (p.follow) { // other panels show an older state: let them follow, after this paint
      const b = document.querySelector("#follow-btn");
      if (b) requestAnimationFrame(() => setTimeout(() => b.click(), 0));
    }
  };
  AV.resync = function () {
    const b = document.querySelector("#resync-btn");
    if (b) b.click();
  };

  // -- lenses other than the weights -----------------------------------------------------------
  function lensCovers() { return !!LENS && LENS.epoch === S.epoch && S.step <= LENS.n; }
  function requestLens() {
    if (!S.started || ui.lensAsked === `${S.epoch}:${S.n}:${ui.lens}`) return;
    ui.lensAsked = `${S.epoch}:${S.n}:${ui.lens}`;
    document.querySelector(`#lens-${ui.lens}-btn`)?.click();
  }
  function setLens(l) {
    const msg = document.getElementById("lens-msg");
    if (msg) msg.textContent = l.error ? l.error : "";
    if (l.name === "weights" || l.name !== ui.lens) { if (l.name === "weights") useLens(null); render(); return; }
    const kinds = {};
    for (const [k, layers] of Object.entries(l.kinds || {})) kinds[k] = layers.map((e) => ({ h: e.h, tq: e.tq, tk: e.tk, w: f32(e.w) }));
    useLens({ name: l.name, epoch: l.epoch, n: l.n, kinds });
    render();
  }
  AV.setLens = function (name) {
    ui.lens = name; ui.lensAsked = "";
    const box = document.getElementById("fixed-scale"), note = document.getElementById("fixed-note");
    if (box) box.disabled = name === "norms"; // no 0–1 scale for sizes: say so beside the switch
    if (note) note.textContent = name === "norms" ? " — off under norms: they are sizes, not shares of 1" : "";
    const sel = document.getElementById("lens-select");
    if (sel) sel.value = name;
    if (name === "weights") { useLens(null); render(); return; }
    if (LENS && LENS.name !== name) useLens(null);
    if (lensCovers()) render(); else { render(); requestLens(); }
  };
  function lensOn(kind, q) {
    if (!LENS || LENS.epoch !== S.epoch || !LENS.kinds[kind]) return false;
    return kind === "encoder_self" || q < LENS.n;
  }
  function lensValue(kind, layer, head, q, k) {
    const e = LENS.kinds[kind][layer];
    const at = (h) => e.w[h * e.tq * e.tk + q * e.tk + k];
    return e.h === 1 ? at(0) : head < 0 ? mean(at, e.h) : at(head);
  }
  function lensName() { return LENS && LENS.epoch === S.epoch ? LENS.name : "weights"; }
  function lensSuffix() { const n = lensName(); return n === "weights" ? "" : ` · ${n}${n === "rollout" ? " (heads averaged)" : ""}`; }

  // -- matrices as shown at the current step -------------------------------------------------
  function labels(kind) {
    const tgt = [S.bos, ...S.tokens.slice(0, Math.max(S.step - 1, 0))];
    return kind === "encoder_self" ? [S.src, S.src] : kind === "decoder_self" ? [tgt, tgt] : [S.src, tgt];
  }
  // value of head h (or the mean) at (q, k) and whether the recorded mask blocks it
  // the weights path reads the page's rows only (cell); another lens reads through lensCell
  function lensCell(kind, layer, head, q, k) {
    const r = cell(kind, layer, head, q, k);
    if (!r[1] && lensOn(kind, q)) r[0] = lensValue(kind, layer, head, q, k);
    return r;
  }
  function useLens(l) { LENS = l; }
  function cell(kind, layer, head, q, k) {
    const H = S.H, ts = S.src.length;
    let w, m, tk, base;
    if (kind === "encoder_self") {
      const e = S.enc[layer]; w = e.w; m = e.m[q * ts + k]; tk = ts; base = q * ts;
      const at = (h) => w[h * ts * ts + base + k];
      return [head < 0 ? mean(at, H) : at(head), m];
    }
    const row = S.rows[kind][layer][q];
    tk = kind === "decoder_self" ? q + 1 : ts;
    if (k >= tk) return [0, 1]; // the future: blocked by the causal mask
    const at = (h) => row.w[h * tk + k];
    return [head < 0 ? mean(at, H) : at(head), row.m[k]];
  }
  function mean(at, H) {
    let s = 0;
    for (let h = 0; h < H; h++) s += at(h);
    return s / H;
  }
  function matrix(kind, layer, head) {
    const [xl, yl] = labels(kind);
    const tq = yl.length, tk = xl.length;
    const z = new Float32Array(tq * tk), m = new Uint8Array(tq * tk), get = LENS ? lensCell : cell;
    for (let q = 0; q < tq; q++)
      for (let k = 0; k < tk; k++) {
        const [v, b] = get(kind, layer, head, q, k);
        z[q * tk + k] = v; m[q * tk + k] = b;
      }
    return { z, m, tq, tk, xl, yl };
  }
  AV.maskedCells = function (kind, layer) { // for tests: the blocked cells this page draws
    const mat = matrix(kind, layer, -1), out = [];
    for (let q = 0; q < mat.tq; q++) out.push(Array.from(mat.m.subarray(q * mat.tk, (q + 1) * mat.tk)));
    return out;
  };

  // -- drawing -------------------------------------------------------------------------------
  let COL = null, WIDTHS = {}; // read once per render, before anything is written
  function colours() {
    if (COL) return COL;
    const cs = getComputedStyle(root || document.body);
    const dark = document.body.classList.contains("dark") || document.documentElement.classList.contains("dark");
    return { text: cs.color || (dark ? "#f3f4f6" : "#1f2937"), bg: dark ? "#1f2937" : "#ffffff", dark };
  }
  function measure() {
    COL = null; COL = colours(); WIDTHS = {};
    root.querySelectorAll(".av-panel").forEach((p) => (WIDTHS[p.id] = p.clientWidth - 18));
  }
  function short(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + "…" : s; }
  function vmaxOf(mats) {
    if (ui.fixed && lensName() !== "norms") return 1; // weights and rollout rows sum to 1; norms are sizes
    let mx = 0;
    for (const mat of mats) for (let i = 0; i < mat.z.length; i++) if (!mat.m[i] && mat.z[i] > mx) mx = mat.z[i];
    return mx > 0 ? mx : 1;
  }
  // lay out panels [{mat, title, outline}] in a grid on one canvas; returns hit boxes
  function drawPanels(canvas, panels, opts) {
    const col = colours(), dpr = window.devicePixelRatio || 1;
    const avail = Math.max(240, opts.width || WIDTHS[canvas.parentElement.id] || 600);
    const cols = Math.min(opts.cols || 1, panels.length);
    const small = cols > 1 || opts.tiny;
    const font = small ? 10 : 12;
    const ctx = canvas.getContext("2d");
    ctx.font = `${font}px sans-serif`;
    const tk = Math.max(...panels.map((p) => p.mat.tk), 1), tq = Math.max(...panels.map((p) => p.mat.tq), 1);
    const showLabels = !opts.tiny;
    let left = 6, bottom = 6;
    if (showLabels) {
      const yw = Math.max(...panels.flatMap((p) => p.mat.yl.map((s) => ctx.measureText(short(s, 12)).width)), 8);
      left = Math.min(yw, 110) + 8;
    }
    const titleH = (opts.title ? 22 : 0), subH = panels.length > 1 || opts.subtitles ? font + 6 : 0;
    const barW = opts.noBar ? 0 : 56;
    const panelW = Math.floor((avail - barW) / cols);
    let cellPx = Math.floor((panelW - left - 8) / tk);
    cellPx = Math.max(2, Math.min(cellPx, opts.maxCell || 26, Math.floor((opts.maxH || 560) / tq)));
    const rotate = showLabels && (cellPx < 14 || panels.some((p) => p.mat.xl.some((s) => String(s).length > 1)));
    if (showLabels) {
      const xw = Math.max(...panels.flatMap((p) => p.mat.xl.map((s) => ctx.measureText(short(s, 12)).width)), 8);
      bottom = rotate ? Math.min(xw, 110) + 10 : font + 8;
    }
    const pw = left + tk * cellPx + 8, ph = subH + tq * cellPx + bottom;
    const rows = Math.ceil(panels.length / cols);
    ctx.font = "bold 13px sans-serif";
    const titleW = opts.title ? ctx.measureText(opts.title).width + 12 : 0;
    ctx.font = `${font}px sans-serif`;
    const W = Math.max(pw * cols + barW, 200, Math.min(titleW, avail)), Hh = titleH + rows * ph + 4;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(Hh * dpr)) {
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(Hh * dpr);
      canvas.style.width = W + "px"; canvas.style.height = Hh + "px";
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = col.bg; ctx.fillRect(0, 0, W, Hh);
    ctx.fillStyle = col.text; ctx.textBaseline = "middle";
    if (opts.title) { ctx.font = "bold 13px sans-serif"; ctx.fillText(opts.title, 4, 11, W - 8); }
    ctx.font = `${font}px sans-serif`;
    const vmax = opts.vmax, boxes = [];
    const every = Math.max(1, Math.ceil((font + 1) / cellPx));
    panels.forEach((p, i) => {
      const x0 = (i % cols) * pw, y0 = titleH + Math.floor(i / cols) * ph;
      const gx = x0 + left, gy = y0 + subH, mat = p.mat;
      if (subH) { ctx.fillStyle = col.text; ctx.textAlign = "left"; ctx.fillText(short(p.title || "", 24), gx, y0 + subH / 2); }
      const img = ctx.createImageData(mat.tk, mat.tq);
      for (let j = 0; j < mat.z.length; j++) {
        let rgb;
        if (mat.m[j]) rgb = MASK_RGB;
        else { const t = Math.max(0, Math.min(255, Math.round((mat.z[j] / vmax) * 255))); rgb = [LUT[t * 3], LUT[t * 3 + 1], LUT[t * 3 + 2]]; }
        img.data[j * 4] = rgb[0]; img.data[j * 4 + 1] = rgb[1]; img.data[j * 4 + 2] = rgb[2]; img.data[j * 4 + 3] = 255;
      }
      OFF.width = Math.max(mat.tk, 1); OFF.height = Math.max(mat.tq, 1);
      OFF.getContext("2d").putImageData(img, 0, 0);
      const off = OFF;
      ctx.imageSmoothingEnabled = false;
      if (mat.tk && mat.tq) ctx.drawImage(off, gx, gy, mat.tk * cellPx, mat.tq * cellPx);
      if (p.outline != null && p.outline >= 0) {
        ctx.strokeStyle = OUTLINE; ctx.lineWidth = 2;
        ctx.strokeRect(gx - 1, gy + p.outline * cellPx - 1, mat.tk * cellPx + 2, cellPx + 2);
      }
      if (showLabels) {
        ctx.fillStyle = col.text; ctx.textAlign = "right";
        for (let q = 0; q < mat.tq; q += every) ctx.fillText(short(mat.yl[q], 12), gx - 4, gy + (q + 0.5) * cellPx);
        for (let k = 0; k < mat.tk; k += every) {
          const x = gx + (k + 0.5) * cellPx, y = gy + mat.tq * cellPx + 4;
          if (rotate) { ctx.save(); ctx.translate(x, y); ctx.rotate(-Math.PI / 2); ctx.textAlign = "right"; ctx.fillText(short(mat.xl[k], 12), 0, 0); ctx.restore(); }
          else { ctx.textAlign = "center"; ctx.fillText(short(mat.xl[k], 12), x, y + font / 2); }
        }
      }
      boxes.push({ x: gx, y: gy, cell: cellPx, mat, title: p.title, key: p.key });
    });
    if (!opts.noBar) { // colour bar: 0 .. vmax, and the masked grey
      const bx = pw * cols + 10, by = titleH + 4, bh = Math.min(120, Math.max(60, Hh - titleH - 40));
      for (let y = 0; y < bh; y++) {
        const t = Math.round((1 - y / bh) * 255);
        ctx.fillStyle = `rgb(${LUT[t * 3]},${LUT[t * 3 + 1]},${LUT[t * 3 + 2]})`;
        ctx.fillRect(bx, by + y, 10, 1);
      }
      ctx.fillStyle = col.text; ctx.textAlign = "left"; ctx.font = "10px sans-serif";
      ctx.fillText(vmax.toFixed(vmax >= 0.1 ? 2 : 3), bx + 13, by + 4); ctx.fillText("0", bx + 13, by + bh - 2);
      ctx.fillStyle = MASKED; ctx.fillRect(bx, by + bh + 8, 10, 10);
      ctx.fillStyle = col.text; ctx.fillText("masked", bx - 4, by + bh + 28);
    }
    canvas._av = boxes;
    canvas._vmax = vmax;
    return boxes;
  }

  function hover(canvas, tip) {
    canvas.addEventListener("mousemove", (ev) => {
      const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      for (const b of canvas._av || []) {
        const k = Math.floor((x - b.x) / b.cell), q = Math.floor((y - b.y) / b.cell);
        if (k >= 0 && q >= 0 && k < b.mat.tk && q < b.mat.tq) {
          const i = q * b.mat.tk + k;
          const what = b.mat.m[i] ? "masked (blocked: weight 0 by construction)" : `${lensName() === "weights" ? "weight" : lensName()} ${b.mat.z[i].toFixed(4)}`;
          tip.textContent = `${b.title ? b.title + ": " : ""}query ${q} “${b.mat.yl[q]}” → key ${k} “${b.mat.xl[k]}”: ${what}`;
          tip.style.display = "block"; tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
          return;
        }
      }
      tip.style.display = "none";
    });
    canvas.addEventListener("mouseleave", () => (tip.style.display = "none"));
  }

  function png(canvas, name) {
    canvas.toBlob((blob) => {
      const a = document.createElement("a");
      a.href = URL.createObjectURL(blob); a.download = `attnviz-${name}-step${S.step}.png`;
      document.body.appendChild(a); a.click(); a.remove();
      setTimeout(() => URL.revokeObjectURL(a.href), 1000);
    }, "image/png");
  }

  // -- the page ------------------------------------------------------------------------------
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const c of kids) if (c) e.appendChild(c);
    return e;
  }
  function panel(id, label) {
    const p = el("div", { class: "av-panel", id });
    const head = el("div", { class: "av-head" }, el("span", { class: "av-title", text: label }));
    const canvas = el("canvas", { class: "av-canvas" });
    const btn = el("button", { class: "av-png", type: "button", title: "download this figure as PNG", text: "PNG" });
    btn.addEventListener("click", () => png(canvas, id));
    head.appendChild(btn);
    p.append(head, el("div", { class: "av-empty" }), canvas);
    hover(canvas, tipEl());
    return p;
  }
  let tip = null;
  function tipEl() {
    if (!tip) { tip = el("div", { class: "av-tip" }); document.body.appendChild(tip); }
    return tip;
  }

  AV.mount = function (element) {
    if (element.querySelector(".av-root")?.dataset.mounted) return;
    root = element.querySelector(".av-root") || element;
    root.dataset.mounted = "1";
    if (!document.getElementById("av-force-style")) document.head.appendChild(el("style", { id: "av-force-style", text: FORCE_CSS }));
    const top = el("div", { class: "av-tokens" },
      el("div", { class: "av-line" }, el("span", { class: "av-label", text: "Source" }), el("div", { id: "source-tokens", class: "tokens" })),
      el("div", { class: "av-line" }, el("span", { class: "av-label", text: "Output" }), el("div", { id: "output-tokens", class: "tokens" })),
      el("div", { class: "av-line av-expected-line" }, el("span", { class: "av-label", text: "Expected" }), el("div", { id: "expected-tokens", class: "tokens" })));
    const fixed = el("input", { type: "checkbox", id: "fixed-scale" });
    fixed.addEventListener("change", () => { ui.fixed = fixed.checked; render(); });
    const lensSel = el("select", { id: "lens-select", "aria-label": "lens" });
    for (const [v, t] of [["weights", "attention weights"], ["norms", "norms ‖α·f(x)‖"], ["rollout", "rollout (heads averaged)"]]) lensSel.appendChild(el("option", { value: v, text: t }));
    lensSel.addEventListener("change", () => AV.setLens(lensSel.value));
    const bar = el("div", { class: "av-bar" },
      el("label", { class: "av-check" }, fixed, el("span", { text: " fixed 0–1 colour scale (else each figure spans 0 to its largest weight)" }), el("span", { id: "fixed-note", class: "av-keys" })),
      el("label", { class: "av-ctl" }, el("span", { text: "lens " }), lensSel, el("span", { id: "lens-msg", class: "av-keys" })),
      el("span", { class: "av-keys", id: "key-hint", text: "Keys (outside a text field): → or n Step · ← or b Back · r Run · Home Reset" }));
    const topk = el("div", { class: "av-panel", id: "topk-plot" }, el("div", { class: "av-head" }, el("span", { class: "av-title", text: "Next-token probabilities" })), el("div", { class: "av-bars" }));
    const rows = el("div", { class: "av-col" }, panel("heatmap-rows-cross", "Rows this step added"), panel("heatmap-rows-decoder", "Rows this step added"));
    const main = el("div", { class: "av-grid2" }, topk, rows);
    root.append(top, bar, main);
    for (const k of KINDS) {
      const p = panel(`heatmap-${k}`, k);
      const layer = el("select", { class: "av-layer", "aria-label": "layer" });
      const headSel = el("select", { class: "av-headsel", "aria-label": "head" });
      layer.addEventListener("change", () => { view[k][0] = +layer.value; measure(); drawKind(k); AV.drawn.t = performance.now(); });
      headSel.addEventListener("change", () => { view[k][1] = headSel.value; measure(); drawKind(k); AV.drawn.t = performance.now(); });
      const h = p.querySelector(".av-head");
      h.insertBefore(el("label", { class: "av-ctl" }, el("span", { text: "layer " }), layer), h.querySelector(".av-png"));
      h.insertBefore(el("label", { class: "av-ctl" }, el("span", { text: "head " }), headSel), h.querySelector(".av-png"));
      root.appendChild(p);
    }
    const kindSel = el("select", { class: "av-modelkind", "aria-label": "attention kind" });
    for (const k of KINDS) kindSel.appendChild(el("option", { value: k, text: k }));
    kindSel.value = ui.modelKind;
    kindSel.addEventListener("change", () => { ui.modelKind = kindSel.value; measure(); drawModel(); });
    const mv = panel("heatmap-model", "Model view: every layer × head (click a head to open it above)");
    mv.querySelector(".av-head").insertBefore(el("label", { class: "av-ctl" }, el("span", { text: "kind " }), kindSel), mv.querySelector(".av-png"));
    const details = el("details", { class: "av-details", id: "model-view" }, el("summary", { text: "Model view: every layer × head" }), mv);
    details.addEventListener("toggle", () => { if (details.open) { measure(); drawModel(); } });
    mv.querySelector("canvas").addEventListener("click", (ev) => {
      const c = ev.currentTarget, r = c.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      for (const b of c._av || []) {
        if (x >= b.x && y >= b.y - 14 && x < b.x + b.mat.tk * b.cell && y < b.y + b.mat.tq * b.cell) {
          AV.openHead(ui.modelKind, b.key[0], b.key[1]);
          return;
        }
      }
    });
    root.appendChild(details);
    new ResizeObserver(() => { // fires when the tab hides (width 0) and shows again
      const w = root.clientWidth;
      if (w && (stale || root._w !== w)) { root._w = w; render(); }
    }).observe(root);
    render();
  };

  // open one head in its kind's heatmap (the model view's click, the Alignment tab's grid)
  AV.openHead = function (kind, layer, head) {
    view[kind] = [+layer, `H${+head}`];
    const p = document.getElementById(`heatmap-${kind}`);
    if (!p) return;
    if (root && root.clientWidth) { measure(); drawKind(kind); }
    p.scrollIntoView({ block: "center" });
  };
  // a button with data-av-open="kind layer head" anywhere on the page opens that head in the
  // step view, switching to its tab first (the page redraws when the tab shows)
  document.addEventListener("click", (ev) => {
    const b = ev.target.closest && ev.target.closest("[data-av-open]");
    if (!b) return;
    const [kind, layer, head] = b.dataset.avOpen.split(" ");
    const tab = [...document.querySelectorAll("[role=tab]")].find((t) => t.textContent.trim() === "Step through");
    if (tab && tab.getAttribute("aria-selected") !== "true") tab.click();
    view[kind] = [+layer, `H${+head}`];
    requestAnimationFrame(() => setTimeout(() => { render(); AV.openHead(kind, layer, head); }, 0));
  });

  function setOptions(sel, values, labelsOf, value) {
    const key = values.join("|");
    if (sel._key !== key) {
      sel.textContent = "";
      values.forEach((v, i) => sel.appendChild(el("option", { value: v, text: labelsOf[i] })));
      sel._key = key;
    }
    sel.value = value;
  }
  function headName(h) { return h === "mean" ? "mean of heads" : h === "all heads" ? "all heads" : `head ${h.slice(1)}`; }

  function drawKind(kind) {
    const p = document.getElementById(`heatmap-${kind}`);
    if (!p) return;
    drew(p);
    const empty = p.querySelector(".av-empty"), canvas = p.querySelector("canvas"), title = p.querySelector(".av-title");
    const name = S.titles[kind] || kind;
    if (!S.started || (kind !== "encoder_self" && S.step === 0)) {
      title.textContent = name;
      empty.textContent = S.started ? `${name}: press Step to add rows` : "type an input and press Step";
      empty.style.display = "block"; canvas.style.display = "none";
      p.querySelectorAll("select").forEach((s) => (s.disabled = !S.started));
      return;
    }
    const L = S.layers[kind], [layer, head] = view[kind];
    const lay = Math.max(0, Math.min(layer, L - 1));
    p.querySelectorAll("select").forEach((s) => (s.disabled = false));
    setOptions(p.querySelector(".av-layer"), [...Array(L).keys()].map(String), [...Array(L).keys()].map((i) => `L${i}`), String(lay));
    const heads = ["mean", "all heads", ...Array.from({ length: S.H }, (_, h) => `H${h}`)];
    setOptions(p.querySelector(".av-headsel"), heads, heads, head);
    const stepTxt = kind === "encoder_self" ? "" : ` · step ${S.step}`;
    const t = `${name} · layer ${lay} · ${headName(head)}${stepTxt}${lensSuffix()}`;
    title.textContent = t;
    const outline = kind === "encoder_self" ? null : S.step - 1;
    let panels;
    if (head === "all heads") panels = Array.from({ length: S.H }, (_, h) => ({ mat: matrix(kind, lay, h), title: `H${h}`, outline }));
    else panels = [{ mat: matrix(kind, lay, head === "mean" ? -1 : +head.slice(1)), outline }];
    empty.style.display = "none"; canvas.style.display = "block";
    drawPanels(canvas, panels, { title: t, cols: head === "all heads" ? Math.min(4, S.H) : 1, vmax: vmaxOf(panels.map((x) => x.mat)), maxCell: 34 });
  }

  function drawModel() {
    const d = document.getElementById("model-view");
    if (!d || !d.open) return;
    const p = document.getElementById("heatmap-model"), kind = ui.modelKind;
    drew(p);
    const empty = p.querySelector(".av-empty"), canvas = p.querySelector("canvas");
    if (!S.started || (kind !== "encoder_self" && S.step === 0)) {
      empty.textContent = "model view: press Step (or pick encoder_self)"; empty.style.display = "block"; canvas.style.display = "none"; return;
    }
    const panels = [];
    for (let l = 0; l < S.layers[kind]; l++)
      for (let h = 0; h < S.H; h++) panels.push({ mat: matrix(kind, l, h), title: `L${l} H${h}`, key: [l, h], outline: kind === "encoder_self" ? null : S.step - 1 });
    empty.style.display = "none"; canvas.style.display = "block";
    drawPanels(canvas, panels, { title: `Model view: ${S.titles[kind] || kind}, layers × heads${lensSuffix()}`, cols: S.H, tiny: true, vmax: vmaxOf(panels.map((x) => x.mat)) });
  }

  function drawRows() {
    for (const [id, kind] of [["heatmap-rows-cross", "cross"], ["heatmap-rows-decoder", "decoder_self"]]) {
      const p = document.getElementById(id);
      if (!p) continue;
      drew(p);
      const empty = p.querySelector(".av-empty"), canvas = p.querySelector("canvas"), title = p.querySelector(".av-title");
      if (!S.started || S.step === 0) {
        title.textContent = `Rows this step added: ${S.titles[kind] || kind}`;
        empty.textContent = "press Step: each step's new query rows appear here"; empty.style.display = "block"; canvas.style.display = "none"; continue;
      }
      const q = S.step - 1, [xl, yl] = labels(kind), tk = xl.length;
      const L = S.layers[kind], H = S.H, z = new Float32Array(L * H * tk), m = new Uint8Array(L * H * tk), names = [];
      const get = LENS ? lensCell : cell;
      for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
        names.push(`L${l} H${h}`);
        for (let k = 0; k < tk; k++) { const [v, b] = get(kind, l, h, q, k); z[(l * H + h) * tk + k] = v; m[(l * H + h) * tk + k] = b; }
      }
      const mat = { z, m, tq: L * H, tk, xl, yl: names };
      const t = `${S.titles[kind] || kind}: rows added at step ${S.step} (query “${yl[q]}”), one per layer × head${lensSuffix()}`;
      title.textContent = t;
      empty.style.display = "none"; canvas.style.display = "block";
      drawPanels(canvas, [{ mat }], { title: t, vmax: vmaxOf([mat]), maxCell: 22, maxH: 400 });
    }
  }

  function drawTopk() {
    const p = document.getElementById("topk-plot");
    if (!p) return;
    drew(p);
    const box = p.querySelector(".av-bars"), title = p.querySelector(".av-title");
    box.textContent = "";
    if (!S.started || S.step === 0) { title.textContent = "Next-token probabilities"; box.appendChild(el("div", { class: "av-empty", text: "press Step: each step's numbers appear here" })); return; }
    const q = S.step - 1, top = S.topk[q] || [], [, yl] = labels("cross");
    const chosen = top.find((x) => x[2]) || ["?", 0], isForced = S.forced.includes(q);
    title.textContent = `step ${S.step}: after “${yl[q]}”, ${isForced ? "forced" : "chose"} “${chosen[0]}” (p = ${chosen[1].toFixed(3)})`;
    for (const [tok, pr, isChosen, id] of top) {
      const row = el("div", { class: "av-barrow av-cand" + (isChosen ? " chosen" : "") + (isChosen && isForced ? " forced" : ""),
        "data-token-id": String(id), role: "button", tabindex: "0",
        title: isChosen ? (isForced ? "forced at this step" : "the model's choice") : `click: feed “${tok}” at step ${S.step} instead, then Step on from it` },
        el("span", { class: "av-bartok", text: tok }),
        el("span", { class: "av-bartrack" }, el("span", { class: "av-barfill", style: `width:${(pr * 100).toFixed(1)}%` })),
        el("span", { class: "av-barval", text: pr.toFixed(3) }));
      if (!isChosen && id !== undefined) {
        row.addEventListener("click", () => AV.force(id, S.step));
        row.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); AV.force(id, S.step); } });
      }
      box.appendChild(row);
    }
  }
  // feed a candidate instead of the argmax: the hidden force button's event reads AV.pending
  AV.pending = "";
  AV.force = function (id, step) {
    const b = document.querySelector("#force-btn");
    if (!b) return;
    AV.pending = `${step}:${id}`;
    b.click();
  };

  function chips(box, labels, cls) {
    box.textContent = "";
    labels.forEach((t, i) => {
      const c = el("span", { class: "tok" + (cls[i] ? " " + cls[i] : ""), text: t });
      box.appendChild(c);
    });
    if (!labels.length) box.appendChild(el("span", { class: "tok-none", text: "—" }));
  }
  function drawTokens() {
    const src = document.getElementById("source-tokens"), out = document.getElementById("output-tokens"), exp = document.getElementById("expected-tokens");
    if (!src) return;
    const unk = new Set(S.unk);
    chips(src, S.pieces, S.pieces.map((_, i) => (unk.has(i) ? "unk" : "")));
    const shown = S.tokens.slice(0, S.step), want = S.expected;
    let bad = -1;
    if (want) for (let i = 0; i < shown.length; i++) if (shown[i] !== want[i]) { bad = i; break; }
    const forced = new Set(S.forced);
    chips(out, shown, shown.map((_, i) => [i === shown.length - 1 ? "newest" : "", i === bad ? "mismatch" : "", forced.has(i) ? "forced" : ""].join(" ").trim()));
    out.querySelectorAll(".tok").forEach((c, i) => { // confidence strip: the chosen token's probability
      const p = S.prob[i] ?? 0;
      c.title = `step ${i + 1}: p = ${p.toFixed(3)}${forced.has(i) ? " · forced" : ""}${i === bad ? " · first mismatch with the expected output" : ""}`;
      c.appendChild(el("span", { class: "conf", style: `width:${Math.round(p * 100)}%` }));
    });
    const line = exp.parentElement;
    if (want && S.started) { line.style.display = ""; chips(exp, want, want.map((_, i) => (i === bad ? "mismatch" : ""))); }
    else line.style.display = "none";
  }

  // The state a panel drew, on the panel (data-drawn) and on the root (data-state: what the
  // page holds now), so a test can tell a current panel from a stale one.
  function stateKey() { return `${S.epoch}|${S.step}`; }
  function drew(p) { if (p) p.dataset.drawn = stateKey(); }
  function render() {
    if (!root) return;
    root.dataset.state = stateKey();
    // a hidden tab has no width to draw into: remember that every panel is stale and redraw
    // them all from what the page holds when it shows again (the ResizeObserver in mount)
    if (!root.clientWidth) { stale = true; drawTokens(); return; }
    stale = false;
    measure();
    drawTokens();
    drawTopk();
    drawRows();
    for (const k of KINDS) drawKind(k);
    drawModel();
    root.dataset.epoch = S.epoch; root.dataset.step = String(S.step);
    AV.drawn = { epoch: S.epoch, step: S.step, t: performance.now() };
  }
  AV.render = render;

  // -- a view outside the app (attnviz.show in a notebook) -----------------------------------
  // AV.drawStatic(element, data) draws one attention kind of a finished decode into
  // `element`, with the renderer above and no page ids: several views share one document.
  // data: {title, kind, heads, layer, head ("mean" | "all heads" | "H<h>"), keys, queries,
  // src, out, layers: [{w: base64 float32 [H, Tq, Tk], m: "0"/"1" per cell [Tq, Tk]}]}.
  AV.drawStatic = function (element, d) {
    element.textContent = ""; // the note shown where scripts do not run
    const H = d.heads, tq = d.queries.length, tk = d.keys.length;
    const layers = d.layers.map((e) => ({ w: f32(e.w), m: bits(e.m, 0, tq * tk) }));
    const mat = (l, h) => {
      const { w, m } = layers[l], z = new Float32Array(tq * tk);
      for (let i = 0; i < tq * tk; i++) z[i] = h >= 0 ? w[h * tq * tk + i] : mean((x) => w[x * tq * tk + i], H);
      return { z, m, tq, tk, xl: d.keys, yl: d.queries };
    };
    const v = { layer: Math.max(0, Math.min(d.layer, layers.length - 1)), head: d.head };
    const line = (label, toks) => el("div", { class: "av-line" }, el("span", { class: "av-label", text: label }),
      el("div", { class: "tokens" }, ...toks.map((t) => el("span", { class: "tok", text: t }))));
    const sel = (cls, values, value) => {
      const s = el("select", { class: cls });
      for (const x of values) s.appendChild(el("option", { value: x, text: x }));
      s.value = String(value);
      return s;
    };
    const layerSel = sel("av-layer", layers.map((_, i) => String(i)), v.layer);
    const headSel = sel("av-headsel", ["mean", "all heads", ...Array.from({ length: H }, (_, h) => `H${h}`)], v.head);
    const main = el("canvas", { class: "av-canvas av-main" }), grid = el("canvas", { class: "av-canvas av-grid" });
    const name = `${d.kind}`;
    if (d.lines !== false) element.append(line("Source", d.src), line("Output", d.out));
    element.append(el("div", { class: "av-head" }, el("label", { class: "av-ctl" }, el("span", { text: "layer " }), layerSel),
        el("label", { class: "av-ctl" }, el("span", { text: "head " }), headSel),
        exportButtons(element, name, () => ({ title: d.title, kind: d.kind, keys: d.keys, queries: d.queries,
          layers: layers.map((e) => ({ weights: nest(e.w, [H, tq, tk]), mask: nest(e.m, [tq, tk]) })) }))), main,
      el("div", { class: "av-sub", text: "every layer × head (click one to open it above)" }), grid);
    const tipBox = tipEl();
    hover(main, tipBox); hover(grid, tipBox);
    let width = 0;
    const draw = () => {
      const saved = COL;
      COL = { text: "#1f2937", bg: "#ffffff", dark: false }; // the view is a light card
      try {
        width = Math.max(element.clientWidth - 4, 0);
        const w = width || 720, h = v.head, t = `${d.title} · layer ${v.layer} · ${headName(h)}`;
        const panels = h === "all heads" ? Array.from({ length: H }, (_, i) => ({ mat: mat(v.layer, i), title: `H${i}` }))
          : [{ mat: mat(v.layer, h === "mean" ? -1 : +h.slice(1)) }];
        drawPanels(main, panels, { title: t, cols: h === "all heads" ? Math.min(4, H) : 1, vmax: vmaxOf(panels.map((p) => p.mat)), maxCell: 34, width: w });
        element._shown = panels.map((p, i) => ({ name: `layer ${v.layer} ${h === "all heads" ? `head ${i}` : headName(h)}`, mat: p.mat }));
        const thumbs = [];
        layers.forEach((_, l) => { for (let i = 0; i < H; i++) thumbs.push({ mat: mat(l, i), title: `L${l} H${i}`, key: [l, i] }); });
        drawPanels(grid, thumbs, { cols: H, tiny: true, vmax: vmaxOf(thumbs.map((p) => p.mat)), maxCell: 12, width: w });
      } finally { COL = saved; }
      element.dataset.drawn = "1";
    };
    layerSel.addEventListener("change", () => { v.layer = +layerSel.value; draw(); });
    headSel.addEventListener("change", () => { v.head = headSel.value; draw(); });
    grid.addEventListener("click", (ev) => {
      const r = grid.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      for (const b of grid._av || []) {
        if (x >= b.x && y >= b.y - 14 && x < b.x + b.mat.tk * b.cell && y < b.y + b.mat.tq * b.cell) {
          v.layer = b.key[0]; v.head = `H${b.key[1]}`; layerSel.value = String(v.layer); headSel.value = v.head; draw(); return;
        }
      }
    });
    // an output may be laid out after its script ran (width 0): draw again once it has a width
    if (window.ResizeObserver) new ResizeObserver(() => { if (element.clientWidth - 4 !== width) draw(); }).observe(element);
    draw();
  };

  // -- exports and the offline report (attnviz inspect --html): static-only ----------------
  // nested arrays of a flat typed array (JSON export): shape [a, b, ...]
  function nest(flat, shape) {
    if (shape.length === 1) return Array.from(flat.subarray(0, shape[0]));
    const n = shape.slice(1).reduce((a, b) => a * b, 1), out = [];
    for (let i = 0; i < shape[0]; i++) out.push(nest(flat.subarray(i * n, (i + 1) * n), shape.slice(1)));
    return out;
  }
  function download(name, blob) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob); a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }
  function csvCell(s) { s = String(s); return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s; }
  // the matrices a figure shows now (element._shown: [{name, mat}]) as CSV, one block each
  AV.csv = function (element) {
    const lines = [];
    for (const { name, mat } of element._shown || []) {
      lines.push(`# ${name}` + (mat.m.some((x) => x) ? " (masked cells: blocked, weight 0 by construction)" : ""));
      lines.push(["query \\ key", ...mat.xl].map(csvCell).join(","));
      for (let q = 0; q < mat.tq; q++) lines.push([csvCell(mat.yl[q]), ...Array.from(mat.z.subarray(q * mat.tk, (q + 1) * mat.tk), (x) => (Number.isNaN(x) ? "" : x.toPrecision(6)))].join(","));
      lines.push("");
    }
    return lines.join("\n");
  };
  // PNG (each canvas), CSV (what is shown) and JSON (every number of the figure) buttons
  function exportButtons(element, name, all) {
    const file = String(name).replace(/[^A-Za-z0-9_-]+/g, "_").slice(0, 48) || "figure";
    const btn = (text, title, fn) => { const b = el("button", { class: "av-png", type: "button", title, text }); b.addEventListener("click", fn); return b; };
    return el("span", { class: "av-export" },
      btn("PNG", "download each canvas of this figure as PNG", () => element.querySelectorAll("canvas").forEach((c, i) =>
        c.toBlob((b) => download(`attnviz-${file}${i ? "-" + i : ""}.png`, b), "image/png"))),
      btn("CSV", "download the matrices shown as CSV", () => download(`attnviz-${file}.csv`, new Blob([AV.csv(element)], { type: "text/csv" }))),
      btn("JSON", "download every number of this figure as JSON", () => download(`attnviz-${file}.json`, new Blob([JSON.stringify(all())], { type: "application/json" }))));
  }
  function tipOn(canvas, text) { // hover text(box, q, k) over any panel of the canvas
    const t = tipEl();
    canvas.addEventListener("mousemove", (ev) => {
      const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      for (const b of canvas._av || []) {
        const k = Math.floor((x - b.x) / b.cell), q = Math.floor((y - b.y) / b.cell);
        if (k >= 0 && q >= 0 && k < b.mat.tk && q < b.mat.tq) {
          t.textContent = text(b, q, k); t.style.display = "block";
          t.style.left = ev.clientX + 12 + "px"; t.style.top = ev.clientY + 12 + "px"; return;
        }
      }
      t.style.display = "none";
    });
    canvas.addEventListener("mouseleave", () => (t.style.display = "none"));
  }
  // a diverging map for signed panels (blue < 0 < red, white at 0): RdBu_r, as plots.DIVERGING
  const RDBU = [[5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240], [247, 247, 247],
    [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31]];
  function signedRgb(t) { // t in [-1, 1]
    const x = (Math.max(-1, Math.min(1, t)) + 1) / 2 * (RDBU.length - 1), j = Math.min(Math.floor(x), RDBU.length - 2), f = x - j;
    return RDBU[j].map((c, i) => Math.round(c * (1 - f) + RDBU[j + 1][i] * f));
  }
  // one signed matrix (e.g. after − before) on its own canvas, symmetric about 0
  function drawSigned(canvas, mat, title, width) {
    const dpr = window.devicePixelRatio || 1, ctx = canvas.getContext("2d"), font = 12;
    ctx.font = `${font}px sans-serif`;
    const span = Math.max(...Array.from(mat.z, Math.abs).filter(Number.isFinite), 0) || 1;
    const lw = (ls) => Math.min(Math.max(...ls.map((s) => ctx.measureText(short(s, 12)).width), 8), 110);
    const left = lw(mat.yl) + 8, bottom = lw(mat.xl) + 10, titleH = 22;
    const cellPx = Math.max(2, Math.min(26, Math.floor((width - left - 80) / Math.max(mat.tk, 1)), Math.floor(560 / Math.max(mat.tq, 1))));
    const W = Math.max(left + mat.tk * cellPx + 80, 240), Hh = titleH + mat.tq * cellPx + bottom;
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(Hh * dpr);
    canvas.style.width = W + "px"; canvas.style.height = Hh + "px";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#ffffff"; ctx.fillRect(0, 0, W, Hh);
    ctx.fillStyle = "#1f2937"; ctx.textBaseline = "middle"; ctx.font = "bold 13px sans-serif"; ctx.fillText(title, 4, 11, W - 8);
    ctx.font = `${font}px sans-serif`;
    const gx = left, gy = titleH;
    for (let q = 0; q < mat.tq; q++) for (let k = 0; k < mat.tk; k++) {
      const v = mat.z[q * mat.tk + k], [r, g, b] = signedRgb(v / span);
      ctx.fillStyle = `rgb(${r},${g},${b})`; ctx.fillRect(gx + k * cellPx, gy + q * cellPx, cellPx, cellPx);
    }
    const every = Math.max(1, Math.ceil((font + 1) / cellPx));
    ctx.fillStyle = "#1f2937"; ctx.textAlign = "right";
    for (let q = 0; q < mat.tq; q += every) ctx.fillText(short(mat.yl[q], 12), gx - 4, gy + (q + 0.5) * cellPx);
    for (let k = 0; k < mat.tk; k += every) {
      ctx.save(); ctx.translate(gx + (k + 0.5) * cellPx, gy + mat.tq * cellPx + 4); ctx.rotate(-Math.PI / 2);
      ctx.fillText(short(mat.xl[k], 12), 0, 0); ctx.restore();
    }
    const bx = gx + mat.tk * cellPx + 12, bh = Math.min(120, Math.max(60, mat.tq * cellPx));
    for (let y = 0; y < bh; y++) { const [r, g, b] = signedRgb(1 - (2 * y) / bh); ctx.fillStyle = `rgb(${r},${g},${b})`; ctx.fillRect(bx, gy + y, 10, 1); }
    ctx.fillStyle = "#1f2937"; ctx.textAlign = "left"; ctx.font = "10px sans-serif";
    ctx.fillText(`+${span.toPrecision(2)}`, bx + 13, gy + 4); ctx.fillText("0", bx + 13, gy + bh / 2); ctx.fillText(`−${span.toPrecision(2)}`, bx + 13, gy + bh - 2);
    canvas._av = [{ x: gx, y: gy, cell: cellPx, mat, title }];
  }
  function matOf(p) { // a panel of a report figure: {tq, tk, z: base64 float32, m: "0"/"1" or "", xl, yl}
    const z = f32(p.z), m = p.m ? bits(p.m, 0, p.tq * p.tk) : new Uint8Array(p.tq * p.tk);
    return { z, m, tq: p.tq, tk: p.tk, xl: p.xl, yl: p.yl };
  }
  const LIGHT = { text: "#1f2937", bg: "#ffffff", dark: false };
  function light(fn) { const saved = COL; COL = LIGHT; try { return fn(); } finally { COL = saved; } } // a light card
  // heatmaps side by side ({panels: [{title, signed, hover}]}): unsigned panels share one
  // canvas and colour scale; each signed panel gets its own canvas with a diverging scale
  function drawHeat(element, d) {
    const plain = d.panels.filter((p) => !p.signed), signed = d.panels.filter((p) => p.signed);
    const mats = d.panels.map(matOf), byPanel = new Map(d.panels.map((p, i) => [p, mats[i]]));
    const row = el("div", { class: "av-row" }), c1 = el("canvas", { class: "av-canvas" });
    const cs = signed.map(() => el("canvas", { class: "av-canvas" }));
    if (plain.length) row.appendChild(c1);
    cs.forEach((c) => row.appendChild(c));
    element.append(el("div", { class: "av-head" }, exportButtons(element, d.name || "figure",
      () => ({ title: d.title, panels: d.panels.map((p, i) => ({ title: p.title, keys: p.xl, queries: p.yl, values: nest(mats[i].z, [p.tq, p.tk]), mask: nest(mats[i].m, [p.tq, p.tk]) })) }))), row);
    const what = d.what || "weight";
    const text = (b, q, k) => {
      const i = q * b.mat.tk + k, p = b.panel;
      const head = `${b.title ? b.title + ": " : ""}${b.mat.yl[q]} → ${b.mat.xl[k]}`;
      if (b.mat.m[i]) return `${head}: masked (blocked: weight 0 by construction)`;
      const note = p && p.hover ? ` · ${p.hover[i]}` : "";
      return `${head}: ${p && p.signed ? "change" : what} ${b.mat.z[i].toFixed(4)}${note}`;
    };
    tipOn(c1, text); cs.forEach((c) => tipOn(c, text));
    let width = 0;
    const draw = () => light(() => {
      width = Math.max(element.clientWidth - 4, 0);
      const w = width || 900;
      if (plain.length) {
        const panels = plain.map((p) => ({ mat: byPanel.get(p), title: p.title }));
        const vmax = d.vmax || vmaxOf(panels.map((p) => p.mat));
        drawPanels(c1, panels, { title: d.title, cols: panels.length, subtitles: true, vmax, maxCell: d.maxCell || 26, width: Math.max(240, w - cs.length * 260) });
        c1._av.forEach((b, i) => (b.panel = plain[i]));
      }
      signed.forEach((p, i) => { drawSigned(cs[i], byPanel.get(p), p.title, 420); cs[i]._av[0].panel = p; });
      element._shown = d.panels.map((p, i) => ({ name: p.title || d.title, mat: mats[i] }));
      element.dataset.drawn = "1";
    });
    if (window.ResizeObserver) new ResizeObserver(() => { if (element.clientWidth - 4 !== width) draw(); }).observe(element);
    draw();
  }
  // training playback: one frame per snapshot ({frames: [{title}], heads, tq, tk, w: base64
  // float32 [S, H, Tq, Tk], m: "0"/"1" [Tq, Tk]}); a slider, play / pause and a head switch
  function drawPlayback(element, d) {
    const S = d.frames.length, H = d.heads, n = d.tq * d.tk, w = f32(d.w), m = d.m ? bits(d.m, 0, n) : new Uint8Array(n);
    const v = { frame: 0, head: "mean", timer: null };
    const mat = () => {
      const z = new Float32Array(n), base = v.frame * H * n;
      for (let i = 0; i < n; i++) z[i] = v.head === "mean" ? mean((h) => w[base + h * n + i], H) : w[base + +v.head.slice(1) * n + i];
      return { z, m, tq: d.tq, tk: d.tk, xl: d.xl, yl: d.yl };
    };
    const range = el("input", { type: "range", class: "av-frame", min: "0", max: String(S - 1), step: "1", value: "0", "aria-label": "snapshot" });
    const play = el("button", { class: "av-png av-play", type: "button", text: "▶ play" });
    const headSel = el("select", { class: "av-headsel", "aria-label": "head" });
    for (const x of ["mean", ...Array.from({ length: H }, (_, h) => `H${h}`)]) headSel.appendChild(el("option", { value: x, text: x }));
    const canvas = el("canvas", { class: "av-canvas" });
    element.append(el("div", { class: "av-head" }, play, range, el("label", { class: "av-ctl" }, el("span", { text: "head " }), headSel),
      exportButtons(element, d.name || "playback", () => ({ title: d.title, steps: d.frames.map((f) => f.step), keys: d.xl, queries: d.yl,
        weights: nest(w, [S, H, d.tq, d.tk]), mask: nest(m, [d.tq, d.tk]) }))), canvas);
    tipOn(canvas, (b, q, k) => b.mat.m[q * b.mat.tk + k] ? `${b.mat.yl[q]} → ${b.mat.xl[k]}: masked (blocked by the causal mask)`
      : `${b.mat.yl[q]} → ${b.mat.xl[k]}: weight ${b.mat.z[q * b.mat.tk + k].toFixed(4)}`);
    let width = 0;
    const draw = () => light(() => {
      width = Math.max(element.clientWidth - 4, 0);
      const x = mat(), t = `${d.frames[v.frame].title} · ${headName(v.head)}`;
      drawPanels(canvas, [{ mat: x }], { title: t, vmax: vmaxOf([x]), maxCell: 30, width: width || 900 });
      element._shown = [{ name: t, mat: x }];
      element.dataset.frame = String(v.frame); element.dataset.drawn = "1";
    });
    const stop = () => { clearInterval(v.timer); v.timer = null; play.textContent = "▶ play"; };
    range.addEventListener("input", () => { v.frame = +range.value; draw(); });
    headSel.addEventListener("change", () => { v.head = headSel.value; draw(); });
    play.addEventListener("click", () => {
      if (v.timer) return stop();
      if (v.frame >= S - 1) v.frame = -1;
      play.textContent = "❚❚ pause";
      v.timer = setInterval(() => { v.frame += 1; range.value = String(v.frame); draw(); if (v.frame >= S - 1) stop(); }, 400);
    });
    if (window.ResizeObserver) new ResizeObserver(() => { if (element.clientWidth - 4 !== width) draw(); }).observe(element);
    draw();
  }
  // AV.drawReport(figures): draw every figure of the report, one per frame in page order (the
  // first appears at once); figures: [{el: element, spec: {type: "attention"|"heat"|"playback"}}].
  // AV.report.times[i]: ms (performance.now) when figure i was drawn.
  AV.report = { times: [], total: 0 };
  AV.drawReport = function (figures) {
    AV.report.total = figures.length;
    const draw = { attention: AV.drawStatic, heat: drawHeat, playback: drawPlayback };
    let i = 0;
    const next = () => {
      if (i >= figures.length) return;
      const { el: e, spec } = figures[i];
      e.textContent = "";
      try { draw[spec.type](e, spec); } catch (err) { e.textContent = `this figure could not be drawn: ${err}`; throw err; }
      finally { AV.report.times[i] = performance.now(); i += 1; requestAnimationFrame(() => setTimeout(next, 0)); }
    };
    next();
  };

  // -- keyboard: with focus outside a text field ---------------------------------------------
  document.addEventListener("keydown", (ev) => {
    const t = ev.target, tag = (t && t.tagName) || "";
    if (ev.ctrlKey || ev.metaKey || ev.altKey || t?.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(tag)) {
      if (tag === "INPUT" && t.type === "number" && ev.key === "Enter" && t.closest("#step-slider")) t.blur(); // apply on Enter
      return;
    }
    const ids = { ArrowRight: "step-btn", n: "step-btn", ArrowLeft: "back-btn", b: "back-btn", r: "run-btn", Home: "reset-btn" };
    const id = ids[ev.key];
    if (!id) return;
    const b = document.getElementById(id);
    if (b) { ev.preventDefault(); b.click(); }
  });
})();

// -- the beam tree: a click (or Enter) on a node selects its hypothesis; the hidden
// #beam-node-btn's event reads AV.beamPending, as the force button reads AV.pending
(() => {
  const AV = window.AttnViz;
  if (!AV || AV.beamNode) return;
  AV.beamPending = "";
  AV.beamNode = function (id) {
    const b = document.querySelector("#beam-node-btn");
    if (!b) return;
    AV.beamPending = String(id);
    b.click();
  };
  const nodeOf = (ev) => {
    const n = ev.target && ev.target.closest ? ev.target.closest("#beam-tree [data-node-id]") : null;
    return n && n.getAttribute("data-node-id") !== "0" ? n : null; // node 0: the start token
  };
  document.addEventListener("click", (ev) => { const n = nodeOf(ev); if (n) AV.beamNode(n.getAttribute("data-node-id")); });
  document.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter" && ev.key !== " ") return;
    const n = nodeOf(ev);
    if (n) { ev.preventDefault(); AV.beamNode(n.getAttribute("data-node-id")); }
  });
})();
