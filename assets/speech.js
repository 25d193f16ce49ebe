// attnviz page side for speech models (Whisper): under the cross-attention heatmap, on its
// own time axis (the heatmap's key k is encoder frame k, 20 ms), the word timeline and the
// clip's log-mel spectrogram; a click on a word, on the strip or on a cross-attention cell
// plays that stretch of the clip in the page. The server's payload carries `speech`
// (attnviz/app/speech.py); this file wraps AttnViz.apply and draws nothing for text models.
(() => {
  if (window.AVSpeech) return;
  const SP = (window.AVSpeech = { data: null, playing: null, drawn: null });
  const WORDS_H = 22, SPEC_H = 72, AXIS_H = 16;
  const OFF = document.createElement("canvas");
  const CSS = `.tokens .tok.special { font-family: ui-monospace, monospace; font-size: 0.85em; background: #ede9fe; color: #5b21b6; border: 1px dashed #7c3aed; }
.dark .tokens .tok.special { background: #3b0764; color: #e9d5ff; }
#speech-strip canvas { display: block; cursor: pointer; }
#speech-strip audio { height: 32px; margin-top: 4px; }`;
  function style() {
    if (document.getElementById("av-speech-style") || !document.head) return;
    const st = document.createElement("style");
    st.id = "av-speech-style"; st.textContent = CSS;
    document.head.appendChild(st);
  }

  function hook() {
    const AV = window.AttnViz;
    if (!AV || AV.speechHooked) return !!AV;
    const apply = AV.apply;
    AV.apply = function (p) {
      apply(p);
      try { SP.apply(p); } catch (e) { console.error("attnviz speech:", e); }
    };
    AV.speechHooked = true;
    return true;
  }
  if (!hook()) document.addEventListener("DOMContentLoaded", hook);

  function u8(b64) {
    const bin = atob(b64), out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  SP.apply = function (p) {
    if (!p || typeof p !== "object" || p.lens || p.enc) return;
    if (!p.started || !p.speech) { // a text model, or nothing started: no speech strip
      if (!p.started || (p.full && !p.speech)) { SP.data = null; draw(); }
      return;
    }
    const s = p.speech;
    if (s.spec) {
      SP.data = { epoch: s.epoch, fps: s.fps, frames: s.frames, seconds: s.seconds, mels: s.mels,
        spec: u8(s.spec), audio: s.audio, words: s.words, note: s.words_note };
      const a = audioEl();
      if (a && a.src !== s.audio) a.src = s.audio;
      const src = document.getElementById("source-tokens");
      if (src) { // the source is the clip: its frames label the heatmaps' time axes
        src.textContent = "";
        const t = document.createElement("span");
        t.className = "tok-none";
        t.textContent = `a ${s.seconds.toFixed(2)} s clip, read as ${s.frames} encoder frames of ${1000 / s.fps} ms (Whisper pads it with silence to 30 s); the heatmaps' keys are these frames, labelled in seconds`;
        src.appendChild(t);
      }
    } else if (SP.data && SP.data.epoch === s.epoch) {
      SP.data.words = s.words; SP.data.note = s.words_note;
    }
    style();
    markSpecials();
    draw();
  };

  // Whisper's special tokens (<|startoftranscript|>, <|notimestamps|>, <|0.00|>, ...) stand out
  function markSpecials() {
    document.querySelectorAll("#output-tokens .tok").forEach((t) => {
      if (/^<\|.*\|>/.test(t.firstChild?.textContent || "")) t.classList.add("special");
    });
  }

  function crossCanvas() { return document.querySelector("#heatmap-cross canvas.av-canvas"); }
  function strip() {
    const c = crossCanvas();
    if (!c) return null;
    let box = document.getElementById("speech-strip");
    if (!box) {
      box = document.createElement("div");
      box.id = "speech-strip";
      const cv = document.createElement("canvas");
      cv.id = "speech-canvas";
      cv.title = "click a word or a time to hear it";
      cv.addEventListener("click", (ev) => {
        const r = cv.getBoundingClientRect(), t = timeAt(ev.clientX - r.left);
        if (t == null) return;
        const w = ev.clientY - r.top < WORDS_H ? wordAt(t) : null;
        if (w) SP.play(w.start, w.end); else SP.play(t, t + 1);
      });
      const note = document.createElement("div");
      note.id = "speech-note"; note.className = "av-keys";
      const a = document.createElement("audio");
      a.id = "speech-audio"; a.controls = true; a.preload = "auto";
      a.addEventListener("timeupdate", () => { if (SP.playing && a.currentTime >= SP.playing.end) a.pause(); });
      box.append(cv, note, a);
      c.after(box);
      // a cross-attention cell clicked: hear the word at its time (or a second from it)
      c.addEventListener("click", (ev) => {
        if (!SP.data || c._drag) return;
        const r = c.getBoundingClientRect(), hit = window.AttnViz.probe("heatmap-cross", ev.clientX - r.left, ev.clientY - r.top);
        if (!hit) return;
        const t = hit.k / SP.data.fps, w = wordAt(t);
        if (w) SP.play(w.start, w.end); else SP.play(Math.max(0, t - 0.25), t + 0.75);
      });
      // the heatmap redrawn (a Step, zoom, pan, layer or head): the strip follows its axis
      const mo = new MutationObserver(() => requestAnimationFrame(draw));
      mo.observe(c, { attributes: true, attributeFilter: ["style"] });
      mo.observe(c.parentElement, { attributes: true, attributeFilter: ["data-drawn"] });
    }
    return box;
  }
  function audioEl() { strip(); return document.getElementById("speech-audio"); }

  function geometry() {
    const c = crossCanvas(), b = c && c._av && c._av[0];
    if (!b || c.style.display === "none") return null;
    return { x: b.x, cell: b.cell, k0: b.k0, w: b.w, width: parseFloat(c.style.width) || c.width };
  }
  function timeAt(x) {
    const g = geometry();
    if (!g || !SP.data || x < g.x || x >= g.x + g.w) return null;
    return (g.k0 + (x - g.x) / g.cell) / SP.data.fps;
  }
  function wordAt(t) {
    for (const w of (SP.data && SP.data.words) || []) if (t >= w.start && t < Math.max(w.end, w.start + 0.02)) return w;
    return null;
  }

  SP.play = function (start, end) {
    const a = audioEl();
    if (!a || !SP.data) return;
    const dur = SP.data.seconds;
    start = Math.max(0, Math.min(start, dur)); end = Math.max(start + 0.05, Math.min(end, dur));
    SP.playing = { start, end };
    try { a.currentTime = start; } catch (e) { /* not loaded yet */ }
    const p = a.play();
    if (p && p.catch) p.catch(() => {}); // autoplay refused: the range is still set
  };

  function draw() {
    const box = document.getElementById("speech-strip") || (SP.data ? strip() : null);
    if (!box) return;
    const g = geometry();
    if (!SP.data || !g) { if (box.style.display !== "none") box.style.display = "none"; SP.drawn = null; return; }
    if (box.style.display) box.style.display = "";
    const d = SP.data, cv = box.querySelector("canvas"), dpr = window.devicePixelRatio || 1;
    const W = g.width, H = WORDS_H + SPEC_H + AXIS_H;
    if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) {
      cv.width = Math.round(W * dpr); cv.height = Math.round(H * dpr);
      cv.style.width = W + "px"; cv.style.height = H + "px";
    }
    const ctx = cv.getContext("2d"), dark = document.body.classList.contains("dark");
    const fg = dark ? "#e5e7eb" : "#111827";
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const nk = Math.min(d.frames - g.k0, Math.ceil(g.w / g.cell));
    const xOf = (t) => g.x + (t * d.fps - g.k0) * g.cell;
    ctx.save(); ctx.beginPath(); ctx.rect(g.x, 0, g.w, H); ctx.clip();
    // the spectrogram: column k is encoder frame k, the lowest mel band at the bottom
    const img = ctx.createImageData(d.frames, d.mels), px = img.data;
    for (let m = 0; m < d.mels; m++) {
      const row = (d.mels - 1 - m) * d.frames;
      for (let k = 0; k < d.frames; k++) {
        const v = d.spec[m * d.frames + k], j = (row + k) * 4;
        const g = dark ? v : 255 - v; // more energy: darker (lighter in dark mode)
        px[j] = g; px[j + 1] = g; px[j + 2] = g; px[j + 3] = 255;
      }
    }
    OFF.width = d.frames; OFF.height = d.mels;
    OFF.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    if (nk > 0) ctx.drawImage(OFF, g.k0, 0, nk, d.mels, g.x, WORDS_H, nk * g.cell, SPEC_H);
    const end = xOf(d.seconds); // Whisper pads every clip with silence to 30 s
    if (end < g.x + g.w) { ctx.fillStyle = "rgba(128,128,128,0.55)"; ctx.fillRect(end, WORDS_H, g.x + g.w - end, SPEC_H); }
    // the word timeline
    ctx.font = "11px sans-serif"; ctx.textBaseline = "middle";
    for (const w of d.words || []) {
      const x0 = xOf(w.start), x1 = Math.max(xOf(w.end), x0 + 2);
      ctx.fillStyle = dark ? "rgba(96,165,250,0.35)" : "rgba(37,99,235,0.18)";
      ctx.fillRect(x0, 2, x1 - x0 - 1, WORDS_H - 4);
      ctx.fillStyle = fg; ctx.textAlign = "left";
      ctx.fillText(w.text.trim(), x0 + 2, WORDS_H / 2, Math.max(x1 - x0 - 3, 4));
    }
    // seconds along the bottom
    ctx.fillStyle = fg; ctx.textAlign = "center"; ctx.font = "10px sans-serif";
    const every = Math.max(1, Math.ceil(40 / (d.fps * g.cell)));
    for (let s = Math.ceil(g.k0 / d.fps / every) * every; xOf(s) <= g.x + g.w; s += every) {
      ctx.fillRect(xOf(s), WORDS_H + SPEC_H, 1, 4);
      ctx.textAlign = xOf(s) < g.x + 8 ? "left" : "center";
      ctx.fillText(`${s}s`, xOf(s), WORDS_H + SPEC_H + 10);
    }
    ctx.restore();
    ctx.fillStyle = fg; ctx.textAlign = "right"; ctx.font = "10px sans-serif";
    ctx.fillText("words", g.x - 4, WORDS_H / 2); ctx.fillText("log-mel", g.x - 4, WORDS_H + SPEC_H / 2);
    const note = box.querySelector("#speech-note");
    note.textContent = d.words ? `clip ${d.seconds.toFixed(2)} s (Whisper pads it to 30 s: grey) · words from the alignment heads' cross-attention · click a word, a time or a cell to hear it`
      : d.note || `clip ${d.seconds.toFixed(2)} s (padded to 30 s: grey) · the word timeline appears when the transcript is complete (Run) · click a time or a cell to hear it`;
    SP.drawn = { k0: g.k0, cell: g.cell, x: g.x, words: (d.words || []).length, epoch: d.epoch };
  }
  SP.draw = draw;
})();
