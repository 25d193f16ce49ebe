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
  // a local layer's sliding window: cells it blocks, apart from the causal triangle's grey
  const WINDOW = "#e3cfa6", WINDOW_RGB = [227, 207, 166];
  const OFF = document.createElement("canvas");
  let S = fresh("");
  let root = null;
  let stale = false; // a render was skipped while the step view was hidden
  const view = {}; // kind -> [layer, head]
  const ui = { fixed: false, modelKind: "cross", lens: "weights", words: false, encQueue: [], encBusy: 0, encAsked: {}, lensKept: {} };
  const THUMB = 64; // model-view thumbnails: at most THUMB x THUMB cells (analysis/words.py)
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
      encBlocks: {}, encMask: {}, thumbs: {}, srcWords: null, tgtWords: null,
      layers: {}, expected: null, bos: "<bos>", titles: {}, info: {}, done: false,
      // a decoder-only model: its prompt but the last token (pre rows, labels) comes first
      arch: "", kindNote: "", pre: 0, preLabels: [], preRows: [] };
  }
  function f32(b64) {
    const bin = atob(b64), u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    return new Float32Array(u8.buffer);
  }
  // one bit per cell, most significant first (encview.packed)
  function unpack(b64, n) {
    const bin = atob(b64), u = new Uint8Array(n);
    for (let i = 0; i < n; i++) u[i] = (bin.charCodeAt(i >> 3) >> (7 - (i & 7))) & 1;
    return u;
  }
  function bits(s, from, n) {
    const u = new Uint8Array(n);
    for (let i = 0; i < n; i++) { const c = s.charCodeAt(from + i) - 48; u[i] = c === 1 || c === 2 ? c : 0; } // 2: the window
    return u;
  }

  // -- applying what the server sent ---------------------------------------------------------
  AV.apply = function (p) {
    if (!p || typeof p !== "object") return;
    if (p.lens) return setLens(p.lens);
    if (p.enc) return setEnc(p.enc);
    if (!p.started) {
      S = fresh(p.epoch || "");
      S.info = p.info || {};
      setKinds(p);
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
      setKinds(p);
      S.pre = p.pre || 0; S.preLabels = p.pre_labels || [];
      S.preRows = (p.prompt_rows || []).map((lay) => { // row r holds its r + 1 keys
        const w = f32(lay.w), out = [];
        let off = 0;
        for (let r = 0; r < S.pre; r++) { out.push({ w: w.subarray(off * S.H, (off + r + 1) * S.H), m: bits(lay.m, off, r + 1) }); off += r + 1; }
        return out;
      });
      const ts = p.src.length;
      S.enc = p.encoder.map((e) => ({ w: f32(e.w), m: bits(e.m, 0, ts * ts) }));
      S.srcWords = p.src_words || null;
      if (p.enc_block) storeEnc(p.enc_block);
      ui.encAsked = {}; ui.encQueue = [];
      document.querySelectorAll(".av-canvas").forEach((c) => (c._zoom = null)); // a new input: unzoomed
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
          const tk = k === "decoder_self" ? S.pre + pos + 1 : ts;
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
    if (p.tgt_words) S.tgtWords = p.tgt_words;
    S.fillers = p.fillers || []; S.noFill = p.no_fill || ""; // an encoder-only model's read
    render();
    if (ui.lens !== "weights" && !lensCovers()) requestLens(); // only off the weights path
    if (p.follow) { // other panels show an older state: let them follow, after this paint
      const b = document.querySelector("#follow-btn");
      if (b) requestAnimationFrame(() => setTimeout(() => b.click(), 0));
    }
  };
  // the kinds this model has (a decoder-only model: no encoder, no cross-attention)
  function setKinds(p) {
    S.arch = p.arch || ""; S.kindNote = p.kind_note || "";
    if (p.model && S.model && p.model !== S.model && ui.words) { // "show: words" is per model
      ui.words = false;
      const sel = document.getElementById("unit-select");
      if (sel) sel.value = "pieces";
      const v = document.querySelector("#unit-value textarea, #unit-value input"); // exports
      if (v) { v.value = "pieces"; v.dispatchEvent(new Event("input", { bubbles: true })); }
    }
    if (p.model) S.model = p.model;
    if (p.layers) S.layers = p.layers;
    S.windows = p.windows || null; // each decoder layer's sliding window (0: sees every key)
    if (S.layers && S.layers[ui.modelKind] === 0) ui.modelKind = KINDS.find((k) => S.layers[k]) || ui.modelKind;
  }
  function hasKind(kind) { return !S.layers || S.layers[kind] === undefined || S.layers[kind] > 0; }
  // the row of the newest query: a decoder-only model's prompt rows come first
  function qOf(kind) { return S.step - 1 + (kind === "decoder_self" ? S.pre : 0); }
  AV.resync = function () {
    const b = document.querySelector("#resync-btn");
    if (b) b.click();
  };

  // -- a long input's encoder self-attention: asked for when shown ----------------------------
  // The first Step of a long input carries one layer/head of it (encview.encoder_block); the
  // page asks for another when it shows it (hidden #enc-btn, AV.encPending), one at a time.
  // Under another lens (norms, rollout) the same requests name it ("norms 1 H2", "rollout
  // thumbs": lensview.encoder_lens_block/_thumbs) and what comes back is kept under its name.
  function storeEnc(e) {
    const ts = e.ts;
    if (!S.encMask[e.layer]) S.encMask[e.layer] = unpack(e.m, ts * ts);
    S.encBlocks[`${e.lens ? e.lens + "|" : ""}${e.layer}|${e.head}`] = { h: e.h, z: f32(e.w) };
  }
  function setEnc(e) {
    if (e.epoch === S.epoch && !e.error) { // still busy while drawing: what it asks for is queued
      if (e.thumbs) S.thumbs[`${e.lens ? e.lens + "|" : ""}${e.words ? "words" : "pieces"}`] = { ...e, z: f32(e.w), m: unpack(e.m, e.tq * e.tk) };
      else storeEnc(e);
      render();
    }
    ui.encBusy = 0;
    // the next request after this paint: a click on #enc-btn while gradio still finishes the
    // event that brought this answer is dropped (the next one then never came)
    requestAnimationFrame(() => setTimeout(pumpEnc, 0));
  }
  // the lens a long input's encoder is shown through: "" (weights) or "norms|" / "rollout|"
  function encLens() { const n = lensName(); return n === "weights" ? "" : n + "|"; }
  function encBlock(layer, head) { // head: -1 the mean, h a head
    const b = S.encBlocks, p = encLens() + layer;
    if (p.startsWith("rollout|")) head = -1; // one matrix per layer (heads averaged)
    if (head < 0) return b[`${p}|mean`] ? [b[`${p}|mean`].z, 0] : null;
    if (b[`${p}|H${head}`]) return [b[`${p}|H${head}`].z, 0];
    if (b[`${p}|all heads`]) return [b[`${p}|all heads`].z, head];
    return null;
  }
  // what to ask the server for (session.encoder_view): "<lens> <layer> <head>" off the weights
  function encWant(what) { const l = encLens(); return l ? `${l.slice(0, -1)} ${what}` : what; }
  function encHas(layer, head) { return !!S.enc[layer] || !!encBlock(layer, head); }
  function askEnc(what) {
    const key = `${S.epoch} ${what}`;
    if (ui.encAsked[key]) return;
    ui.encAsked[key] = 1;
    ui.encQueue.push(key);
    pumpEnc();
  }
  function pumpEnc() {
    if ((ui.encBusy && performance.now() - ui.encBusy < 15000) || !ui.encQueue.length) return;
    const b = document.querySelector("#enc-btn");
    if (!b) return;
    AV.encPending = ui.encQueue.shift();
    ui.encBusy = performance.now();
    b.click();
  }
  AV.encPending = "";
  // the step view's layer/head of a kind, told to the server (hidden #view-btn): the panels
  // drawn there (Reference, a beam node) show the same layer and head
  function tellView(k) {
    AV.viewPending = `${k} ${view[k][0]} ${view[k][1]}`;
    document.querySelector("#view-btn")?.click();
  }
  AV.viewPending = "";

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
    for (const k of Object.keys(ui.lensKept)) if (ui.lensKept[k].epoch !== l.epoch) delete ui.lensKept[k];
    ui.lensKept[l.name] = LENS; // switching back to it redraws from the page
    render();
  }
  AV.setLens = function (name) {
    // a long input: the lens payload carries the decoder's kinds; the encoder's layer/head
    // (and the model view's thumbnails) are asked for when shown, like its weights
    ui.lens = name; ui.lensAsked = "";
    const box = document.getElementById("fixed-scale"), note = document.getElementById("fixed-note");
    if (box) box.disabled = name === "norms"; // no 0–1 scale for sizes: say so beside the switch
    if (note) note.textContent = name === "norms" ? " — off under norms: they are sizes, not shares of 1" : "";
    const sel = document.getElementById("lens-select");
    if (sel) sel.value = name;
    if (name === "weights") { useLens(null); render(); return; }
    if (!LENS || LENS.name !== name) useLens(ui.lensKept[name]?.epoch === S.epoch ? ui.lensKept[name] : null);
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
    const tgt = [...S.preLabels, S.bos, ...S.tokens.slice(0, Math.max(S.step - 1, 0))];
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
      const e = S.enc[layer];
      if (!e) { const [z, h] = encBlock(layer, head); return [z[h * ts * ts + q * ts + k], S.encMask[layer][q * ts + k]]; }
      w = e.w; m = e.m[q * ts + k]; tk = ts; base = q * ts;
      const at = (h) => w[h * ts * ts + base + k];
      return [head < 0 ? mean(at, H) : at(head), m];
    }
    const pre = kind === "decoder_self" ? S.pre : 0;
    const row = q < pre ? S.preRows[layer][q] : S.rows[kind][layer][q - pre];
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
  function pieceMatrix(kind, layer, head) {
    const [xl, yl] = labels(kind);
    const tq = yl.length, tk = xl.length;
    if (kind === "encoder_self" && !S.enc[layer]) { // a long input's block: as sent (weights or the lens)
      const [z, h] = encBlock(layer, head);
      return { z: z.subarray(h * tq * tk, (h + 1) * tq * tk), m: S.encMask[layer], tq, tk, xl, yl };
    }
    const z = new Float32Array(tq * tk), m = new Uint8Array(tq * tk), get = LENS ? lensCell : cell;
    for (let q = 0; q < tq; q++)
      for (let k = 0; k < tk; k++) {
        const [v, b] = get(kind, layer, head, q, k);
        z[q * tk + k] = v; m[q * tk + k] = b;
      }
    return { z, m, tq, tk, xl, yl };
  }
  // the matrix shown: pieces, or pooled into words (ui.words)
  function matrix(kind, layer, head) {
    const mat = pieceMatrix(kind, layer, head);
    return ui.words ? toWords(mat, ...wordsOf(kind)) : mat;
  }
  // [key words, query words] of a kind as {index, text} (views._words), cut to the shown pieces
  function wordsOf(kind) {
    const src = S.srcWords || { index: S.src.map((_, i) => i), text: S.src };
    const tgt = S.tgtWords || { index: [0], text: [S.bos] };
    return kind === "encoder_self" ? [src, src] : kind === "decoder_self" ? [tgt, tgt] : [src, tgt];
  }
  function wordLabels(w, n) {
    const out = [];
    for (let i = 0; i < n; i++) { const j = w.index[i]; out[j] = (out[j] || "") + w.text[i]; }
    return out.map((s) => s.trim() || "␣");
  }
  // Pieces -> words, the alignment module's rule (analysis/words.py pool_words): summed over a
  // word's key pieces, averaged over its query pieces (rows whose every key is blocked are left
  // out); a word cell is blocked where every piece cell under it is.
  function toWords(mat, kw, qw) {
    const { tq, tk } = mat;
    if (!tq || !tk) return mat;
    const qi = qw.index, ki = kw.index, nq = qi[tq - 1] + 1, nk = ki[tk - 1] + 1;
    const z = new Float32Array(nq * nk), reach = new Uint8Array(nq * nk), cnt = new Float64Array(nq);
    const acc = new Float64Array(nq * nk), live = new Uint8Array(tq);
    for (let q = 0; q < tq; q++) {
      for (let k = 0; k < tk; k++) if (!mat.m[q * tk + k]) { live[q] = 1; break; }
      if (live[q]) cnt[qi[q]] += 1;
    }
    for (let q = 0; q < tq; q++) {
      if (!live[q]) continue;
      const row = qi[q] * nk;
      for (let k = 0; k < tk; k++) {
        const j = row + ki[k];
        acc[j] += mat.z[q * tk + k];
        if (!mat.m[q * tk + k]) reach[j] = 1;
      }
    }
    const m = new Uint8Array(nq * nk);
    for (let a = 0; a < nq; a++) for (let b = 0; b < nk; b++) {
      const j = a * nk + b;
      m[j] = reach[j] ? 0 : 1;
      z[j] = cnt[a] ? acc[j] / cnt[a] : 0;
    }
    return { z, m, tq: nq, tk: nk, xl: wordLabels(kw, tk), yl: wordLabels(qw, tq) };
  }
  // max over blocks of at most THUMB x THUMB cells (analysis/words.py downsample)
  function thumb(mat) {
    const bq = Math.max(1, Math.ceil(mat.tq / THUMB)), bk = Math.max(1, Math.ceil(mat.tk / THUMB));
    if (bq === 1 && bk === 1) return mat;
    const nq = Math.ceil(mat.tq / bq), nk = Math.ceil(mat.tk / bk), z = new Float32Array(nq * nk), m = new Uint8Array(nq * nk).fill(1);
    for (let q = 0; q < mat.tq; q++) for (let k = 0; k < mat.tk; k++) {
      const i = q * mat.tk + k, j = Math.floor(q / bq) * nk + Math.floor(k / bk);
      if (!mat.m[i]) { if (m[j] || mat.z[i] > z[j]) z[j] = mat.z[i]; m[j] = 0; }
    }
    const span = (labels, b, n) => Array.from({ length: n }, (_, i) => `${labels[i * b]} … ${labels[Math.min((i + 1) * b, labels.length) - 1]}`);
    return { z, m, tq: nq, tk: nk, xl: span(mat.xl, bk, nk), yl: span(mat.yl, bq, nq), blocks: [bq, bk] };
  }
  AV.matrixOf = function (kind, layer, head) { // for tests: the matrix a heatmap shows
    if (kind === "encoder_self" && !encHas(layer, head)) return null; // not asked for yet
    const mat = matrix(kind, layer, head);
    return { z: Array.from(mat.z), m: Array.from(mat.m), tq: mat.tq, tk: mat.tk, xl: mat.xl, yl: mat.yl };
  };
  AV.maskedCells = function (kind, layer) { // for tests: the blocked cells this page draws
    if (kind === "encoder_self" && !encHas(layer, -1)) { askEnc(`${layer} mean`); return null; }
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
  // a label's width (shortened as drawn), measured once per font: a long input's labels repeat
  const WIDTH_OF = new Map();
  function textW(ctx, font, s) {
    const key = `${font}|${s}`;
    let w = WIDTH_OF.get(key);
    if (w === undefined) { w = ctx.measureText(short(s, 12)).width; if (WIDTH_OF.size < 20000) WIDTH_OF.set(key, w); }
    return w;
  }
  // lay out panels [{mat, title, outline}] in a grid on one canvas; returns hit boxes.
  // Zoom (canvas._zoom = {z, k0, q0}): each cell is z times its fitted size (integers both:
  // crisp cells), the grid keeps its size and shows the cells k0.., q0.. that fit (pan).
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
    const zm = canvas._zoom || (canvas._zoom = { z: 1, k0: 0, q0: 0 });
    let left = 6, bottom = 6;
    if (showLabels) {
      const yw = Math.max(...panels.flatMap((p) => p.mat.yl.map((s) => textW(ctx, font, s))), 8);
      left = Math.min(yw, 110) + 8;
    }
    const titleH = (opts.title ? 22 : 0), subH = panels.length > 1 || opts.subtitles ? font + 6 : 0;
    const barW = opts.noBar ? 0 : 56;
    const panelW = Math.floor((avail - barW) / cols);
    let base = Math.floor((panelW - left - 8) / tk);
    // 2 px a cell at least, or 1 where that fits the panel and 2 would not (a 614-token prompt:
    // the whole matrix, its colour bar and legend in view; + zooms in)
    base = Math.max(base === 1 ? 1 : 2, Math.min(base, opts.maxCell || 26, Math.floor((opts.maxH || 560) / tq)));
    // a few rows of many keys (cross-attention of a long input): taller rows, up to the cap
    const baseH = opts.tiny ? base : Math.max(base, Math.min(opts.maxCell || 26, 22, Math.floor((opts.maxH || 560) / tq)));
    const cellPx = base * zm.z, cellH = baseH * zm.z; // integers: every cell the same whole pixels
    const gw = tk * base, gh = tq * baseH; // the grid's size, zoomed or not
    const nk = Math.min(tk, Math.ceil(gw / cellPx)), nq = Math.min(tq, Math.ceil(gh / cellH));
    zm.k0 = Math.max(0, Math.min(Math.round(zm.k0), tk - Math.floor(gw / cellPx)));
    zm.q0 = Math.max(0, Math.min(Math.round(zm.q0), tq - Math.floor(gh / cellH)));
    const k0 = zm.k0, q0 = zm.q0;
    const rotate = showLabels && (cellPx < 14 || panels.some((p) => p.mat.xl.some((s) => String(s).length > 1)));
    if (showLabels) {
      const xw = Math.max(...panels.flatMap((p) => p.mat.xl.map((s) => textW(ctx, font, s))), 8);
      bottom = rotate ? Math.min(xw, 110) + 10 : font + 8;
    }
    const pw = left + gw + 8, ph = subH + gh + bottom;
    const rows = Math.ceil(panels.length / cols);
    ctx.font = "bold 13px sans-serif";
    const titleW = opts.title ? ctx.measureText(opts.title).width + 12 : 0;
    ctx.font = `${font}px sans-serif`;
    // tall enough for the colour bar and its legend (a 1-2 row heatmap clipped them)
    const hasWin = panels.some((p) => p.mat.m.includes(2)), legend = hasWin ? 76 : 40;
    const barNeed = opts.noBar ? 0 : titleH + 64 + legend;
    const W = Math.max(pw * cols + barW, 200, Math.min(titleW, avail)), Hh = Math.max(titleH + rows * ph + 4, barNeed);
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(Hh * dpr)) {
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(Hh * dpr);
      canvas.style.width = W + "px"; canvas.style.height = Hh + "px";
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = col.bg; ctx.fillRect(0, 0, W, Hh);
    ctx.fillStyle = col.text; ctx.textBaseline = "middle";
    if (opts.title) { ctx.font = "bold 13px sans-serif"; ctx.fillText(opts.title + (zm.z > 1 ? ` · zoom ×${zm.z}` : ""), 4, 11, W - 8); }
    ctx.font = `${font}px sans-serif`;
    const vmax = opts.vmax, boxes = [];
    const every = Math.max(1, Math.ceil((font + 1) / cellPx)), everyQ = Math.max(1, Math.ceil((font + 1) / cellH)); // labels thinned to what fits
    panels.forEach((p, i) => {
      const x0 = (i % cols) * pw, y0 = titleH + Math.floor(i / cols) * ph;
      const gx = x0 + left, gy = y0 + subH, mat = p.mat;
      if (subH) { ctx.fillStyle = col.text; ctx.textAlign = "left"; ctx.fillText(short(p.title || "", 24), gx, y0 + subH / 2); }
      const img = ctx.createImageData(Math.max(mat.tk, 1), Math.max(mat.tq, 1)), px = img.data;
      for (let j = 0; j < mat.z.length; j++) {
        let r, g, b;
        if (mat.m[j]) [r, g, b] = mat.m[j] === 2 ? WINDOW_RGB : MASK_RGB;
        else { const t = Math.max(0, Math.min(255, Math.round((mat.z[j] / vmax) * 255))) * 3; r = LUT[t]; g = LUT[t + 1]; b = LUT[t + 2]; }
        px[j * 4] = r; px[j * 4 + 1] = g; px[j * 4 + 2] = b; px[j * 4 + 3] = 255;
      }
      OFF.width = Math.max(mat.tk, 1); OFF.height = Math.max(mat.tq, 1);
      OFF.getContext("2d").putImageData(img, 0, 0);
      ctx.imageSmoothingEnabled = false;
      const vk = Math.min(nk, mat.tk - k0), vq = Math.min(nq, mat.tq - q0); // cells in view
      if (vk > 0 && vq > 0) {
        ctx.save(); ctx.beginPath(); ctx.rect(gx, gy, gw, gh); ctx.clip();
        ctx.drawImage(OFF, k0, q0, vk, vq, gx, gy, vk * cellPx, vq * cellH);
        ctx.restore();
      }
      const oq = p.outline == null ? -1 : p.outline - q0;
      if (oq >= 0 && oq < nq && p.outline < mat.tq) {
        ctx.strokeStyle = OUTLINE; ctx.lineWidth = 2;
        ctx.strokeRect(gx - 1, gy + oq * cellH - 1, Math.min(vk * cellPx, gw) + 2, cellH + 2);
      }
      if (showLabels) {
        ctx.fillStyle = col.text; ctx.textAlign = "right";
        for (let q = q0; q < q0 + vq; q += everyQ) ctx.fillText(short(mat.yl[q], 12), gx - 4, gy + (q - q0 + 0.5) * cellH);
        for (let k = k0; k < k0 + vk; k += every) {
          const x = gx + (k - k0 + 0.5) * cellPx, y = gy + gh + 4;
          if (rotate) { ctx.save(); ctx.translate(x, y); ctx.rotate(-Math.PI / 2); ctx.textAlign = "right"; ctx.fillText(short(mat.xl[k], 12), 0, 0); ctx.restore(); }
          else { ctx.textAlign = "center"; ctx.fillText(short(mat.xl[k], 12), x, y + font / 2); }
        }
      }
      boxes.push({ x: gx, y: gy, cell: cellPx, ch: cellH, k0, q0, w: Math.min(vk * cellPx, gw), h: Math.min(vq * cellH, gh), mat, title: p.title, key: p.key });
    });
    if (!opts.noBar) { // colour bar: 0 .. vmax, and the masked grey
      const bx = pw * cols + 10, by = titleH + 4, bh = Math.min(120, Math.max(60, Hh - titleH - legend));
      for (let y = 0; y < bh; y++) {
        const t = Math.round((1 - y / bh) * 255);
        ctx.fillStyle = `rgb(${LUT[t * 3]},${LUT[t * 3 + 1]},${LUT[t * 3 + 2]})`;
        ctx.fillRect(bx, by + y, 10, 1);
      }
      ctx.fillStyle = col.text; ctx.textAlign = "left"; ctx.font = "10px sans-serif";
      ctx.fillText(vmax.toFixed(vmax >= 0.1 ? 2 : 3), bx + 13, by + 4); ctx.fillText("0", bx + 13, by + bh - 2);
      ctx.fillStyle = MASKED; ctx.fillRect(bx, by + bh + 8, 10, 10);
      ctx.fillStyle = col.text; ctx.fillText("masked", bx - 4, by + bh + 28);
      if (hasWin) { // a local layer: the window's own colour
        ctx.fillStyle = WINDOW; ctx.fillRect(bx, by + bh + 36, 10, 10);
        ctx.fillStyle = col.text; ctx.fillText("outside", bx - 4, by + bh + 56); ctx.fillText("window", bx - 4, by + bh + 67);
      }
    }
    canvas._av = boxes; canvas._title = opts.title || ""; // what was drawn (read back by tests)
    canvas._vmax = vmax;
    canvas._geom = { cols, base, baseH, tk, tq };
    return boxes;
  }

  // the cell under a point of a canvas (canvas coordinates): {box, q, k} or null
  function cellAt(canvas, x, y) {
    for (const b of canvas._av || []) {
      if (x < b.x || y < b.y || x >= b.x + b.w || y >= b.y + b.h) continue;
      const k = b.k0 + Math.floor((x - b.x) / b.cell), q = b.q0 + Math.floor((y - b.y) / b.ch);
      if (k < b.mat.tk && q < b.mat.tq) return { box: b, q, k };
    }
    return null;
  }
  // for tests: what the cell under a point of a panel's canvas shows (value, mask, tokens)
  AV.probe = function (id, x, y) {
    const c = document.querySelector(`#${id} canvas`), hit = c && cellAt(c, x, y);
    if (!hit) return null;
    const { box: b, q, k } = hit, i = q * b.mat.tk + k;
    return { q, k, value: b.mat.z[i], masked: !!b.mat.m[i], query: b.mat.yl[q], key: b.mat.xl[k], vmax: c._vmax, zoom: c._zoom, title: b.title || "" };
  };
  AV.colourOf = function (value, vmax) { // for tests: the colour a cell of this value gets
    const t = Math.max(0, Math.min(255, Math.round((value / vmax) * 255))) * 3;
    return [LUT[t], LUT[t + 1], LUT[t + 2]];
  };

  function hover(canvas, tip) {
    // the tip for the cell under the pointer; a pan (drag) calls it too, so it follows the cells
    canvas._tipAt = (ev) => {
      const r = canvas.getBoundingClientRect(), hit = cellAt(canvas, ev.clientX - r.left, ev.clientY - r.top);
      if (hit) {
        const { box: b, q, k } = hit, i = q * b.mat.tk + k;
        const what = b.mat.m[i] === 2 ? "outside the sliding window (blocked: weight 0 by construction)" : b.mat.m[i] ? "masked (blocked: weight 0 by construction)" : `${lensName() === "weights" ? "weight" : lensName()} ${b.mat.z[i].toFixed(4)}`;
        tip.textContent = `${b.title ? b.title + ": " : ""}query ${q} “${b.mat.yl[q]}” → key ${k} “${b.mat.xl[k]}”: ${what}`;
        tip.style.display = "block"; tip.style.left = ev.clientX + 12 + "px"; tip.style.top = ev.clientY + 12 + "px";
        return;
      }
      tip.style.display = "none";
    };
    canvas.addEventListener("mousemove", (ev) => { if (!canvas._drag) canvas._tipAt(ev); });
    canvas.addEventListener("mouseleave", () => { if (!canvas._drag) tip.style.display = "none"; });
  }

  // zoom (wheel over the cells, or the panel's + / − / 1:1 buttons) and pan (drag) a canvas;
  // canvas._redraw draws it again from what the page holds
  // factor: 2 / 0.5 (the buttons: double, halve), "in" / "out" (a wheel notch: one step of
  // about 1.25x, whole pixels per cell kept), 0 (the whole matrix)
  AV.zoom = function (canvas, factor, at) {
    const zm = canvas._zoom || (canvas._zoom = { z: 1, k0: 0, q0: 0 }), g = canvas._geom;
    if (!g) return;
    const next = factor === "in" ? Math.max(zm.z + 1, Math.round(zm.z * 1.25))
      : factor === "out" ? Math.min(zm.z - 1, Math.round(zm.z / 1.25))
      : factor > 1 ? zm.z * 2 : Math.floor(zm.z / 2);
    const z = factor === 0 ? 1 : Math.max(1, Math.min(64, next));
    if (z === zm.z && factor !== 0) return;
    const b = (canvas._av || [])[0];
    // keep the cell under the pointer (or the view's centre) where it is
    const fx = at && b ? (at[0] - b.x) / (g.tk * g.base) : 0.5, fy = at && b ? (at[1] - b.y) / (g.tq * g.baseH) : 0.5;
    const ck = zm.k0 + fx * g.tk / zm.z, cq = zm.q0 + fy * g.tq / zm.z;
    zm.z = z; zm.k0 = z === 1 ? 0 : ck - fx * g.tk / z; zm.q0 = z === 1 ? 0 : cq - fy * g.tq / z;
    canvas._redraw?.();
  };
  function zoomable(canvas) {
    canvas.addEventListener("wheel", (ev) => {
      const r = canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
      if (!cellAt(canvas, x, y)) return;
      const zin = ev.deltaY < 0, z = canvas._zoom?.z || 1;
      if (!zin && z === 1) return; // nothing to zoom out of: the page scrolls
      ev.preventDefault();
      // a notch is one small step; a trackpad's many small deltas add up to one
      canvas._wheel = (canvas._wheel || 0) + ev.deltaY * (ev.deltaMode === 1 ? 40 : 1);
      if (Math.abs(canvas._wheel) < 50) return;
      canvas._wheel = 0;
      AV.zoom(canvas, zin ? "in" : "out", [x, y]);
    }, { passive: false });
    canvas.addEventListener("mousedown", (ev) => {
      const zm = canvas._zoom, g = canvas._geom;
      if (!zm || zm.z === 1 || !g || ev.button !== 0) return;
      ev.preventDefault();
      const cell = g.base * zm.z, cellH = g.baseH * zm.z, start = [ev.clientX, ev.clientY, zm.k0, zm.q0];
      canvas._drag = true; canvas.style.cursor = "grabbing";
      const move = (e) => {
        const k0 = start[2] - (e.clientX - start[0]) / cell, q0 = start[3] - (e.clientY - start[1]) / cellH;
        if (Math.round(k0) !== zm.k0 || Math.round(q0) !== zm.q0) { zm.k0 = k0; zm.q0 = q0; canvas._redraw?.(); }
        canvas._tipAt?.(e); // the tip names the cell now under the pointer
      };
      const up = () => { canvas._drag = false; canvas.style.cursor = ""; window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); };
      window.addEventListener("mousemove", move); window.addEventListener("mouseup", up);
    });
  }
  function zoomButtons(canvas) {
    const b = (text, title, f) => { const x = el("button", { class: "av-zoom", type: "button", title, text }); x.addEventListener("click", () => AV.zoom(canvas, f)); return x; };
    return [b("+", "zoom in (or the mouse wheel over the cells; drag to pan)", 2), b("−", "zoom out", 0.5), b("1:1", "the whole matrix", 0)];
  }

  function save(blob, file) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob); a.download = file;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }
  // a figure's file name: its panel, the layer and head a kind's heatmap shows, the step
  function fileName(name, ext) {
    const k = name.startsWith("heatmap-") ? name.slice(8) : "";
    const v = KINDS.includes(k) && view[k] ? `-L${view[k][0]}-${String(view[k][1]).replace(/\s+/g, "-")}` : "";
    return `attnviz-${name}${v}-step${S.step}${ui.words ? "-words" : ""}.${ext}`;
  }
  // the figure as drawn (pieces or words, zoomed or not)
  function png(canvas, name) {
    canvas.toBlob((blob) => save(blob, fileName(name, "png")), "image/png");
  }
  // the matrices drawn (pieces or words; every cell, zoomed or not): one block per panel,
  // a header row of keys, a column of queries; a masked cell is empty
  AV.csv = function (canvas) {
    const q = (x) => `"${String(x).replace(/"/g, '""')}"`, lines = [], boxes = canvas._av || [];
    for (const b of boxes) {
      const { z, m, tq, tk, xl, yl } = b.mat;
      if (boxes.length > 1) lines.push(q(b.title || ""));
      lines.push([q("query \\ key"), ...xl.map(q)].join(","));
      for (let r = 0; r < tq; r++) {
        const row = [q(yl[r])];
        for (let k = 0; k < tk; k++) row.push(m[r * tk + k] ? "" : String(z[r * tk + k]));
        lines.push(row.join(","));
      }
    }
    return lines.join("\n") + "\n";
  };
  function csv(canvas, name) {
    save(new Blob([AV.csv(canvas)], { type: "text/csv" }), fileName(name, "csv"));
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
    const csvBtn = el("button", { class: "av-csv", type: "button", title: "download the matrices shown as CSV (pieces or words, as the switch says; a masked cell is empty)", text: "CSV" });
    csvBtn.addEventListener("click", () => csv(canvas, id));
    head.append(...zoomButtons(canvas), btn, csvBtn);
    p.append(head, el("div", { class: "av-empty" }), canvas);
    hover(canvas, tipEl());
    zoomable(canvas);
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
      el("div", { class: "av-line" }, el("span", { class: "av-label", id: "source-label", text: "Source" }), el("div", { id: "source-tokens", class: "tokens" })),
      el("div", { class: "av-line" }, el("span", { class: "av-label", text: "Output" }), el("div", { id: "output-tokens", class: "tokens" })),
      el("div", { class: "av-line av-expected-line" }, el("span", { class: "av-label", text: "Expected" }), el("div", { id: "expected-tokens", class: "tokens" })));
    const fixed = el("input", { type: "checkbox", id: "fixed-scale" });
    fixed.addEventListener("change", () => { ui.fixed = fixed.checked; render(); });
    const lensSel = el("select", { id: "lens-select", "aria-label": "lens" });
    for (const [v, t] of [["weights", "attention weights"], ["norms", "norms ‖α·f(x)‖"], ["rollout", "rollout (heads averaged)"]]) lensSel.appendChild(el("option", { value: v, text: t }));
    lensSel.addEventListener("change", () => AV.setLens(lensSel.value));
    const unitSel = el("select", { id: "unit-select", "aria-label": "pieces or words" });
    for (const [v, t] of [["pieces", "pieces"], ["words", "words (pieces pooled)"]]) unitSel.appendChild(el("option", { value: v, text: t }));
    unitSel.addEventListener("change", () => AV.setUnit(unitSel.value));
    const bar = el("div", { class: "av-bar" },
      el("label", { class: "av-check" }, fixed, el("span", { text: " fixed 0–1 colour scale (else each figure spans 0 to its largest weight)" }), el("span", { id: "fixed-note", class: "av-keys" })),
      el("label", { class: "av-ctl" }, el("span", { text: "lens " }), lensSel, el("span", { id: "lens-msg", class: "av-keys" })),
      el("label", { class: "av-ctl", title: "words: each word's attention summed over its key pieces and averaged over its query pieces (the alignment rule)" }, el("span", { text: "show " }), unitSel),
      el("span", { class: "av-keys", id: "key-hint", text: "Keys (outside a text field): → or n Step · ← or b Back · r Run · Home Reset" }));
    const topk = el("div", { class: "av-panel", id: "topk-plot" }, el("div", { class: "av-head" }, el("span", { class: "av-title", text: "Next-token probabilities" })), el("div", { class: "av-bars" }));
    const rows = el("div", { class: "av-col" }, panel("heatmap-rows-cross", "Rows this step added"), panel("heatmap-rows-decoder", "Rows this step added"));
    const main = el("div", { class: "av-grid2" }, topk, rows);
    root.append(top, bar, main);
    for (const k of KINDS) {
      const p = panel(`heatmap-${k}`, k);
      const layer = el("select", { class: "av-layer", "aria-label": "layer" });
      const headSel = el("select", { class: "av-headsel", "aria-label": "head" });
      // drawn now, or (a long input's encoder) once the layer/head asked for is here
      layer.addEventListener("change", () => { view[k][0] = +layer.value; measure(); if (drawKind(k) !== false) AV.drawn.t = performance.now(); tellView(k); });
      headSel.addEventListener("change", () => { view[k][1] = headSel.value; measure(); if (drawKind(k) !== false) AV.drawn.t = performance.now(); tellView(k); });
      const h = p.querySelector(".av-head");
      h.insertBefore(el("label", { class: "av-ctl" }, el("span", { text: "layer " }), layer), h.querySelector(".av-png"));
      h.insertBefore(el("label", { class: "av-ctl" }, el("span", { text: "head " }), headSel), h.querySelector(".av-png"));
      root.appendChild(p);
      // a model without an encoder: one sentence where its panels would be
      if (k === "decoder_self") root.appendChild(el("div", { class: "av-kind-note", id: "kind-note" }));
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
        if (x >= b.x && y >= b.y - 14 && x < b.x + b.w && y < b.y + b.h) {
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
    p.style.display = hasKind(kind) ? "" : "none"; // a kind this model lacks: the note says why
    if (!hasKind(kind)) return;
    if (!(WIDTHS[p.id] > 0)) WIDTHS[p.id] = p.clientWidth - 18; // measured while hidden (0): now shown
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
    const win = kind === "decoder_self" && S.windows && S.windows.some((w) => w) ? S.windows : null; // Gemma 3, Mistral
    const layerName = (i) => (win ? `L${i} ${win[i] ? `local (window ${win[i]})` : "global"}` : `L${i}`);
    setOptions(p.querySelector(".av-layer"), [...Array(L).keys()].map(String), [...Array(L).keys()].map(layerName), String(lay));
    const heads = ["mean", "all heads", ...Array.from({ length: S.H }, (_, h) => `H${h}`)];
    setOptions(p.querySelector(".av-headsel"), heads, heads, head);
    const stepTxt = kind === "encoder_self" ? "" : ` · step ${S.step}`;
    const winTxt = win ? (win[lay] ? ` (local, window ${win[lay]})` : " (global)") : "";
    const t = `${name} · layer ${lay}${winTxt} · ${headName(head)}${stepTxt}${lensSuffix()}${ui.words ? " · words" : ""}`;
    title.textContent = t;
    const outline = kind === "encoder_self" ? null : ui.words ? wordRow(kind) : qOf(kind);
    canvas._redraw = () => { measure(); drawKind(kind); };
    if (kind === "encoder_self") { // a long input: this layer/head (and its mask) comes when asked for
      const hs = head === "all heads" ? [...Array(S.H).keys()] : [head === "mean" ? -1 : +head.slice(1)];
      if (!hs.every((h) => encHas(lay, h))) {
        askEnc(encWant(`${lay} ${encLens() === "rollout|" ? "mean" : head}`));
        empty.textContent = `loading encoder self-attention${lensSuffix()}, layer ${lay}, ${headName(head)} (a long input: the page asks for what it shows)…`;
        empty.style.display = "block"; canvas.style.display = "none";
        return false;
      }
    }
    // the encoder's heatmap does not change with the step: drawn again only when what it
    // shows changed (a 512 x 512 redraw per Step would cost the Step tens of ms)
    const zm = canvas._zoom, key = kind === "encoder_self" ? [S.epoch, lay, head, ui.words, lensName(), LENS && LENS.n, ui.fixed,
      zm ? `${zm.z},${zm.k0},${zm.q0}` : "", WIDTHS[p.id], colours().dark, t].join("|") : null;
    if (key && canvas._key === key && canvas.style.display !== "none") return true;
    canvas._key = key;
    let panels;
    // a decoder-only model's heads side by side: each one's share on the first key (<bos>,
    // the attention sink) in the row of the step shown
    const sinkOf = (mat) => {
      if (kind !== "decoder_self" || S.arch !== "decoder-only" || typeof outline !== "number" || outline < 0 || outline >= mat.tq || mat.m[outline * mat.tk]) return "";
      return ` · ${short(mat.xl[0] || "key 0", 8)} ${mat.z[outline * mat.tk].toFixed(2)}`;
    };
    if (head === "all heads") panels = Array.from({ length: S.H }, (_, h) => { const mat = matrix(kind, lay, h); return { mat, title: `H${h}${sinkOf(mat)}`, outline }; });
    else panels = [{ mat: matrix(kind, lay, head === "mean" ? -1 : +head.slice(1)), outline }];
    empty.style.display = "none"; canvas.style.display = "block";
    drawPanels(canvas, panels, { title: t, cols: head === "all heads" ? Math.min(4, S.H) : 1, vmax: vmaxOf(panels.map((x) => x.mat)), maxCell: 34 });
  }

  function drawModel() {
    const d = document.getElementById("model-view");
    if (!d || !d.open) return;
    const sel = document.querySelector(".av-modelkind");
    if (sel) { for (const o of sel.options) o.hidden = o.disabled = !hasKind(o.value); sel.value = ui.modelKind; }
    const p = document.getElementById("heatmap-model"), kind = ui.modelKind;
    drew(p);
    const empty = p.querySelector(".av-empty"), canvas = p.querySelector("canvas");
    if (!S.started || (kind !== "encoder_self" && S.step === 0)) {
      empty.textContent = "model view: press Step (or pick encoder_self)"; empty.style.display = "block"; canvas.style.display = "none"; return;
    }
    canvas._redraw = () => { measure(); drawModel(); };
    const outline = kind === "encoder_self" ? null : ui.words ? wordRow(kind) : qOf(kind);
    let panels = [], blocks = [1, 1];
    let cols = S.H, what = "weight";
    if (kind === "encoder_self" && !S.enc.length) { // a long input: the server's thumbnails (of the lens shown)
      const th = S.thumbs[`${encLens()}${ui.words ? "words" : "pieces"}`];
      if (!th) {
        askEnc(encWant(ui.words ? "thumbs words" : "thumbs"));
        empty.textContent = "loading the encoder's thumbnails (a long input: downsampled on the server)…"; empty.style.display = "block"; canvas.style.display = "none"; return;
      }
      const n = th.tq * th.tk, span = (b, i) => (b > 1 ? `${i * b}–${(i + 1) * b - 1}` : String(i));
      const yl = Array.from({ length: th.tq }, (_, i) => `${ui.words ? "words" : "pieces"} ${span(th.bq, i)}`), xl = Array.from({ length: th.tk }, (_, i) => `${ui.words ? "words" : "pieces"} ${span(th.bk, i)}`);
      for (let l = 0; l < th.L; l++)
        for (let h = 0; h < th.h; h++) panels.push({ mat: { z: th.z.subarray((l * th.h + h) * n, (l * th.h + h + 1) * n), m: th.m, tq: th.tq, tk: th.tk, xl, yl }, title: th.h > 1 ? `L${l} H${h}` : `L${l}`, key: [l, th.h > 1 ? h : 0], outline: null });
      blocks = [th.bq, th.bk];
      if (th.h === 1) cols = th.L; // rollout: one matrix per layer
      if (th.lens) what = th.lens === "norms" ? "norm" : "rollout value";
    } else {
      for (let l = 0; l < S.layers[kind]; l++)
        for (let h = 0; h < S.H; h++) {
          const mat = thumb(matrix(kind, l, h));
          if (mat.blocks) blocks = mat.blocks;
          panels.push({ mat, title: `L${l} H${h}`, key: [l, h], outline: mat.blocks ? null : outline });
        }
    }
    const small = blocks[0] > 1 || blocks[1] > 1 ? ` · downsampled to ≤${THUMB}×${THUMB} (each cell: the largest ${what} of ${blocks[0]}×${blocks[1]} ${ui.words ? "words" : "pieces"}; open a ${cols === S.H ? "head" : "layer"} for every cell)` : "";
    empty.style.display = "none"; canvas.style.display = "block";
    drawPanels(canvas, panels, { title: `Model view: ${S.titles[kind] || kind}, layers × heads${lensSuffix()}${ui.words ? " · words" : ""}${small}`, cols, tiny: true, vmax: vmaxOf(panels.map((x) => x.mat)) });
  }
  // the word row holding the newest query piece (words mode's outline)
  function wordRow(kind) { const w = wordsOf(kind)[1], q = Math.max(qOf(kind), 0); return w.index[q] ?? q; }

  // keys pooled in blocks of b: a cell is the largest unmasked weight of its block, masked
  // only where every key of it is; labelled by its first and last key
  function poolKeys(mat, b) {
    const tk = Math.ceil(mat.tk / b), z = new Float32Array(mat.tq * tk), m = new Uint8Array(mat.tq * tk).fill(1), xl = [];
    for (let j = 0; j < tk; j++) xl.push(`${mat.xl[j * b]}–${mat.xl[Math.min(mat.tk, (j + 1) * b) - 1]}`);
    for (let q = 0; q < mat.tq; q++) for (let k = 0; k < mat.tk; k++) {
      const i = q * tk + Math.floor(k / b), v = mat.z[q * mat.tk + k];
      if (!mat.m[q * mat.tk + k] && (m[i] || v > z[i])) { z[i] = v; m[i] = 0; }
    }
    return { ...mat, z, m, tk, xl };
  }

  function drawRows() {
    for (const [id, kind] of [["heatmap-rows-cross", "cross"], ["heatmap-rows-decoder", "decoder_self"]]) {
      const p = document.getElementById(id);
      if (!p) continue;
      drew(p);
      p.style.display = hasKind(kind) ? "" : "none";
      if (!hasKind(kind)) continue;
      const empty = p.querySelector(".av-empty"), canvas = p.querySelector("canvas"), title = p.querySelector(".av-title");
      if (!S.started || S.step === 0) {
        title.textContent = `Rows this step added: ${S.titles[kind] || kind}`;
        empty.textContent = "press Step: each step's new query rows appear here"; empty.style.display = "block"; canvas.style.display = "none"; continue;
      }
      const q = qOf(kind), [xl, yl] = labels(kind), tk = xl.length;
      const L = S.layers[kind], H = S.H, z = new Float32Array(L * H * tk), m = new Uint8Array(L * H * tk), names = [];
      const get = LENS ? lensCell : cell;
      for (let l = 0; l < L; l++) for (let h = 0; h < H; h++) {
        names.push(`L${l} H${h}`);
        for (let k = 0; k < tk; k++) { const [v, b] = get(kind, l, h, q, k); z[(l * H + h) * tk + k] = v; m[(l * H + h) * tk + k] = b; }
      }
      let mat = { z, m, tq: L * H, tk, xl, yl: names };
      if (ui.words) mat = toWords(mat, wordsOf(kind)[0], { index: names.map((_, i) => i), text: names });
      // more keys than fit the panel at 2 px (a clip's 1500 frames): each cell the largest of
      // `pool` keys, so the panel, its buttons and its colour bar stay within the page's width
      const fit = Math.max(40, Math.floor(((WIDTHS[id] || 600) - 56 - 130) / 2)), pool = Math.ceil(mat.tk / fit);
      if (pool > 1) mat = poolKeys(mat, pool);
      canvas._redraw = () => { measure(); drawRows(); };
      const t = `${S.titles[kind] || kind}: rows added at step ${S.step} (query “${yl[q]}”), one per layer × head${lensSuffix()}${ui.words ? " · words (summed over each word's pieces)" : ""}${pool > 1 ? ` · each cell: the largest of ${pool} keys (open the panel above for every key)` : ""}`;
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
    if (S.arch === "encoder-only") return drawFillers(box, title);
    if (!S.started || S.step === 0) { title.textContent = "Next-token probabilities"; box.appendChild(el("div", { class: "av-empty", text: "press Step: each step's numbers appear here" })); return; }
    const q = S.step - 1, top = S.topk[q] || [], [, yl] = labels("decoder_self");
    const chosen = top.find((x) => x[2]) || ["?", 0], isForced = S.forced.includes(q);
    title.textContent = `step ${S.step}: after “${yl[qOf("decoder_self")]}”, ${isForced ? "forced" : "chose"} “${chosen[0]}” (p = ${chosen[1].toFixed(3)})`;
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
  // an encoder-only model: the best fillers at each mask token of the sentence read
  function drawFillers(box, title) {
    title.textContent = "Fillers at each mask token";
    if (!S.started) { box.appendChild(el("div", { class: "av-empty", text: "type a sentence and press Read" })); return; }
    if (!(S.fillers || []).length) { box.appendChild(el("div", { class: "av-empty", id: "no-fill", text: S.noFill })); return; }
    for (const f of S.fillers) {
      const group = el("div", { class: "av-fillers", "data-position": String(f.position) },
        el("div", { class: "av-keys", text: `position ${f.position} (${f.piece})` }));
      for (const [tok, pr] of f.top)
        group.appendChild(el("div", { class: "av-barrow av-filler" },
          el("span", { class: "av-bartok", text: tok }),
          el("span", { class: "av-bartrack" }, el("span", { class: "av-barfill", style: `width:${(pr * 100).toFixed(1)}%` })),
          el("span", { class: "av-barval", text: pr.toFixed(3) })));
      box.appendChild(group);
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

  // a subword piece's word-start marker (▁): small, subdued and raised off the strip below
  function chipText(c, t) {
    if (t.length > 1 && t[0] === "\u2581") {
      c.appendChild(el("span", { class: "av-ws", text: "\u2581" }));
      c.appendChild(document.createTextNode(t.slice(1)));
    } else c.textContent = t;
  }
  function chips(box, labels, cls) {
    box.textContent = "";
    labels.forEach((t, i) => {
      const c = el("span", { class: "tok" + (cls[i] ? " " + cls[i] : "") });
      chipText(c, t);
      box.appendChild(c);
    });
    if (!labels.length) box.appendChild(el("span", { class: "tok-none", text: "—" }));
  }
  // pieces from..from+n-1 of a {index, text} (views._words) grouped into words:
  // [{label, pieces: [0-based piece offsets from `from`]}]; null when it does not cover them
  function wordGroups(w, from, n) {
    if (!w || w.index.length < from + n) return null;
    const out = [];
    let last = -1;
    for (let i = from; i < from + n; i++) {
      if (w.index[i] !== last) { out.push({ label: "", pieces: [] }); last = w.index[i]; }
      const g = out[out.length - 1];
      g.label += w.text[i]; g.pieces.push(i - from);
    }
    for (const g of out) g.label = g.label.trim() || "␣";
    return out;
  }
  function drawTokens() {
    const src = document.getElementById("source-tokens"), out = document.getElementById("output-tokens"), exp = document.getElementById("expected-tokens");
    if (!src) return;
    const unk = new Set(S.unk);
    const label = document.getElementById("source-label");
    const reads = S.arch === "encoder-only"; // reads a sentence, outputs nothing
    if (label) label.textContent = S.arch === "decoder-only" ? "Prompt" : reads ? "Sentence" : "Source";
    out.parentElement.style.display = reads ? "none" : "";
    const hint = document.getElementById("key-hint");
    if (hint) hint.style.display = reads ? "none" : "";
    const key = (S.started ? S.epoch : "") + (ui.words ? "|words" : "");
    if (src._key !== key || !S.started) { // a long input's chips are built once per input and unit
      const ws = ui.words ? wordGroups(S.srcWords, 0, S.pieces.length) : null;
      if (ws) chips(src, ws.map((g) => g.label), ws.map((g) => (g.pieces.some((i) => unk.has(i)) ? "unk" : "")));
      else chips(src, S.pieces, S.pieces.map((_, i) => (unk.has(i) ? "unk" : "")));
      src._key = S.started ? key : "";
    }
    const shown = S.tokens.slice(0, S.step), want = S.expected;
    let bad = -1;
    if (want) for (let i = 0; i < shown.length; i++) if (shown[i] !== want[i]) { bad = i; break; }
    const forced = new Set(S.forced);
    // words: the output's pieces (after the start token) grouped as the tgt words say
    const groups = (ui.words && wordGroups(S.tgtWords, 1 + S.pre, shown.length)) || shown.map((t, i) => ({ label: t, pieces: [i] }));
    const last = shown.length - 1;
    chips(out, groups.map((g) => g.label), groups.map((g) => [g.pieces.includes(last) ? "newest" : "", g.pieces.includes(bad) ? "mismatch" : "",
      g.pieces.some((i) => forced.has(i)) ? "forced" : ""].join(" ").trim()));
    out.querySelectorAll(".tok").forEach((c, j) => { // confidence strip: the chosen tokens' probability
      const ps = groups[j].pieces, p = ps.reduce((a, i) => a * (S.prob[i] ?? 0), 1);
      const steps = ps.length > 1 ? `steps ${ps[0] + 1}–${ps[ps.length - 1] + 1}` : `step ${ps[0] + 1}`;
      c.title = `${steps}: p = ${p.toFixed(3)}${ps.some((i) => forced.has(i)) ? " · forced" : ""}${ps.includes(bad) ? " · first mismatch with the expected output" : ""}`;
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
    const note = document.getElementById("kind-note");
    if (note) { note.textContent = S.kindNote; note.style.display = S.kindNote ? "" : "none"; }
    drawModel();
    root.dataset.epoch = S.epoch; root.dataset.step = String(S.step);
    AV.drawn = { epoch: S.epoch, step: S.step, t: performance.now() };
  }
  AV.render = render;
  // pieces | words: every heatmap (and its PNG) pools subword pieces into words, or not
  AV.setUnit = function (unit) {
    ui.words = unit === "words";
    const sel = document.getElementById("unit-select");
    if (sel) sel.value = ui.words ? "words" : "pieces";
    document.querySelectorAll(".av-canvas").forEach((c) => (c._zoom = null)); // other cells
    const v = document.querySelector("#unit-value textarea, #unit-value input"); // exports follow
    if (v) { v.value = ui.words ? "words" : "pieces"; v.dispatchEvent(new Event("input", { bubbles: true })); }
    render();
  };
  AV.unit = () => (ui.words ? "words" : "pieces");

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
    const name = d.name || `${d.kind}`;
    if (d.lines !== false) element.append(line("Source", d.src), line("Output", d.out));
    element.append(el("div", { class: "av-head" }, el("label", { class: "av-ctl" }, el("span", { text: "layer " }), layerSel),
        el("label", { class: "av-ctl" }, el("span", { text: "head " }), headSel),
        exportButtons(element, name, () => ({ title: d.title, kind: d.kind, keys: d.keys, queries: d.queries,
          layers: layers.map((e) => ({ weights: nest(e.w, [H, tq, tk]), mask: nest(e.m, [tq, tk]) })) }))), main,
      el("div", { class: "av-sub", text: "every layer × head (click one to open it above)" }), grid);
    const tipBox = tipEl();
    hover(main, tipBox); hover(grid, tipBox); zoomable(main); zoomable(grid);
    main._redraw = grid._redraw = () => draw();
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
        if (x >= b.x && y >= b.y - 14 && x < b.x + b.w && y < b.y + b.h) {
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
  AV.shownCsv = function (element) {
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
      btn("CSV", "download the matrices shown as CSV", () => download(`attnviz-${file}.csv`, new Blob([AV.shownCsv(element)], { type: "text/csv" }))),
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
