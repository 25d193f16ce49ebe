"""The app's rows of ``attnviz bench``: what a person waits for, measured where they wait.

- one Step on the server (decode, the rows, the page's payload serialised) and the payload's
  size per Step (:func:`bench_app`);
- the peak memory of a process serving 10 sessions (:func:`bench_app_memory`);
- in headless Chromium (Playwright, the system Chromium), the time from a click to the
  redrawn page for Step, Back, scrub and a layer/head change, and the bytes the page
  receives per Step, on models/reverse and an opus-mt-shaped random model, and for a
  512-token source on that model also the first Step, the page's JS heap and the first
  Step's bytes (:func:`bench_browser`);
- the server's RSS after 100 Steps of a 512- and a 1,024-token source (:func:`long_memory`).

:func:`attnviz.bench.suite.run` runs them with the library's rows; gradio is imported only by the
browser rows.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

import torch

from ..app import server, session, views
from ..app.decoders import DECODERS
from ..core.config import ModelConfig
from ..core.model import Transformer
from .rows import CHROMIUM, CHROMIUM_ARGS, MODELS, Row, app_threads


def bench_step(ckpt_path: str, text: str, repeats: int = 20) -> float:
    """Median seconds of one Step on the server: the decode, its rows and the page payload.

    Each repeat starts ``text`` afresh, decodes all but the last token, then times the last
    Step with a cold decoder half the time (rebuilt by forcing) — the realistic mix.
    """
    state = session.start(session.new_state(ckpt_path), text).state
    full = session.run(state).state
    n = len(full.tokens)
    times = []
    for i in range(repeats):
        s = dataclasses.replace(full, tokens=full.tokens[: n - 1], step=n - 1, page_rows=n - 1)
        if i % 2:
            DECODERS.forget(s.sid)
        t0 = time.perf_counter()
        view = session.step(s)
        views.json_size(view.payload)  # what gradio does with the payload
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_app(quick: bool) -> list[Row]:
    """Row 6 (server side): one app Step with the page's payload built and serialised."""
    with app_threads():
        return _bench_app(quick)


def _bench_app(quick: bool) -> list[Row]:
    path = str(MODELS / "reverse")
    if not (MODELS / "reverse" / "model.safetensors").is_file():
        return [Row("app step", float("nan"), "ms", "<= 100", None, "models/reverse missing")]
    text = "abcdefghijklmnopqrst"
    t = bench_step(path, text, repeats=5 if quick else 30)
    done = session.run(session.start(session.new_state(path), text).state).state
    n = len(done.tokens)  # the last step decoded again: the longest rows
    last = dataclasses.replace(done, tokens=done.tokens[: n - 1], step=n - 1, page_rows=n - 1)
    size = views.json_size(session.step(last).payload)
    return [
        Row("app step on the server (20-char input: decode, trace, page payload)", t * 1e3,
            "ms", "<= 100", t <= 0.1, "the browser rows below are what a person waits for"),
        Row("page payload per step", size / 1024, "KB", "< 200", size < 200 * 1024,
            "only the rows this step added"),
    ]  # fmt: skip


_APP_MEMORY = """
import sys
from attnviz.app import session, views
path, calls = sys.argv[1], int(sys.argv[2])
def rss():
    # peak resident set of this process image; getrusage's ru_maxrss would also count the
    # parent's pages from before exec
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # MB
words = [w * 2 for w in ("abcdefghij", "helloworld", "qwertyuiop", "zyxwvutsrq", "mnbvcxzlkj")]
first = session.step(session.start(session.new_state(path), "abc").state)
views.json_size(first.payload)
base = rss()
states = [session.start(session.new_state(path), words[i % 5][: 11 + i]).state for i in range(10)]
for c in range(calls):
    for i, st in enumerate(states):
        view = session.step(st) if c % 3 != 2 else session.back(st)
        states[i] = view.state
        views.json_size(view.payload)
print(base, rss())
"""


_LONG_MEMORY = """
import sys
from attnviz.app import session, views
from attnviz.bench.app import long_text
folder, n, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def mem():
    got = {}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS:", "VmHWM:")):
            got[line.split(":")[0]] = int(line.split()[1]) / 1024  # MB
    return got["VmRSS"], got["VmHWM"]
views.json_size(session.step(session.new_state(folder), "warm up").payload)
base = mem()[0]
view = session.step(session.new_state(folder), long_text(n))
assert len(view.state.src_ids) == n, len(view.state.src_ids)
views.json_size(view.payload)
while view.state.step < steps:
    state = view.state
    view = session.step(state) if not state.done else session.force(state, 5, state.step + 1)
    views.json_size(view.payload)
    assert view.state.step > state.step, view.message
print(base, *mem())
"""


def long_memory(folder: Path, n: int, steps: int) -> tuple[float, float, float]:
    """``(MB after one short Step, RSS, peak RSS)`` of a fresh process serving one session
    ``steps`` Steps of an ``n``-token input on the checkpoint in ``folder`` (MB)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _LONG_MEMORY, str(folder), str(n), str(steps)],
        capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    base, now, peak = map(float, out.stdout.split()[-3:])
    return base, now, peak


def bench_app_memory(quick: bool) -> list[Row]:
    """Peak RSS of a fresh process serving 10 app sessions x 100 Step/Back calls."""
    import subprocess
    import sys

    if not (MODELS / "reverse" / "model.safetensors").is_file():
        return []
    calls = 20 if quick else 100
    out = subprocess.run(
        [sys.executable, "-c", _APP_MEMORY, str(MODELS / "reverse"), str(calls)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    base, peak = map(float, out.stdout.split()[-2:])
    return [Row(f"peak RSS after 10 app sessions x {calls} Step/Back calls", peak, "MB", "-", None,
                f"{base:.0f} MB after the first step (torch, one model loaded)")] + _long_memory_rows(quick)  # fmt: skip


def _long_memory_rows(quick: bool) -> list[Row]:
    """Server RSS after 100 Steps of a 512-token input and of a 1,024-token one on an
    opus-mt-shaped random model, one session, a fresh process each (not with ``--quick``)."""
    import tempfile

    if quick:  # a fresh process decoding 100 Steps of 512 and 1,024 tokens: minutes
        return []
    steps, rows = 100, []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (LONG_TOKENS, 2 * LONG_TOKENS):
            folder = opus_shaped_checkpoint(Path(tmp) / f"long{n}", max_len=n + 2 * steps)
            base, now, peak = long_memory(folder, n, steps)
            rows.append(Row(f"server RSS after {steps} Steps of a {n}-token input (opus-mt shape)",
                            now, "MB", "-", None, f"{now - base:+.0f} MB over a short input's "
                            f"first Step; peak {peak:.0f} MB (the encoder pass)"))  # fmt: skip
    return rows


# Click `sel` (or run `act`), then resolve with the ms until the output box reads `output`
# and the page has drawn step `step` (checked each animation frame, so paint is included).
_CLICK = """async ([sel, step, output, act]) => {
  const box = document.querySelector('#output-text textarea');
  const t0 = performance.now();
  if (act === 'scrub') {
    const r = document.querySelector('#step-slider input[type=range]');
    r.value = String(step); r.dispatchEvent(new Event('input', {bubbles: true}));
    r.dispatchEvent(new Event('change', {bubbles: true}));
    r.dispatchEvent(new PointerEvent('pointerup', {bubbles: true}));
  } else if (act) {
    const s = document.querySelector(sel); s.value = act;
    s.dispatchEvent(new Event('change', {bubbles: true}));
  } else document.querySelector(sel).click();
  return await new Promise((res, rej) => {
    const until = t0 + 20000;
    const check = () => {
      const d = window.AttnViz.drawn;
      if (box.value === output && d.step === step && d.t >= t0) res(performance.now() - t0);
      else if (performance.now() > until) rej(new Error('not redrawn: ' + box.value + ' ' + d.step));
      else requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
  });
}"""
_BYTES = """() => performance.getEntriesByType('resource')
  .filter(e => e.name.includes('/run/predict') || e.name.includes('/queue/data'))
  .map(e => e.encodedBodySize || e.transferSize || 0)"""


# Click the candidate `n` (cycling) of the next-token panel other than the chosen one, then
# resolve with the ms until the page has redrawn step `step` with that token marked forced.
_FORCE = """async ([step, n]) => {
  const rows = Array.from(document.querySelectorAll('#topk-plot .av-cand:not(.chosen)'));
  if (!rows.length) throw new Error('no candidate to force');
  const row = rows[n % rows.length], label = row.querySelector('.av-bartok').textContent;
  const t0 = performance.now();
  row.click();
  return await new Promise((res, rej) => {
    const until = t0 + 20000;
    const check = () => {
      const d = window.AttnViz.drawn, chips = document.querySelectorAll('#output-tokens .tok');
      const last = chips[chips.length - 1];
      if (d.step === step && d.t >= t0 && last && last.classList.contains('forced')
          && last.firstChild.textContent === label) res(performance.now() - t0);
      else if (performance.now() > until) rej(new Error('not redrawn after forcing ' + label));
      else requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
  });
}"""


def _force_clicks(page, step: int, outputs: list[str], clicks: int) -> list[float]:
    """Scrub to ``step``, then force a candidate there ``clicks`` times (each a different
    token than the one shown); ms from each click to the redrawn page."""
    if step != page.evaluate("() => window.AttnViz.drawn.step"):
        page.evaluate(_CLICK, [None, step, outputs[step], "scrub"])
    return [page.evaluate(_FORCE, [step, i]) for i in range(clicks)]


def opus_shaped_checkpoint(folder: Path, max_len: int = 256, **shape) -> Path:
    """A random model of opus-mt's shape (d_model 512, 8 heads, 6+6 layers, d_ff 2048) with a
    character tokenizer, saved with :func:`attnviz.save_checkpoint` in ``folder``.

    Args:
        max_len: the model's positions (a long input needs more than the default 256).
        shape: other :class:`~attnviz.ModelConfig` fields (a smaller model for tests).
    """
    import string

    from ..checkpoint import save_checkpoint
    from ..data.tokenizer import Tokenizer

    tok = Tokenizer("char", list(string.ascii_lowercase + " .,"))
    dims = dict(d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6, d_ff=2048)
    cfg = ModelConfig(len(tok), len(tok), **{**dims, **shape}, dropout=0.0, max_len=max_len)
    torch.manual_seed(0)
    return save_checkpoint(folder, Transformer(cfg).eval(), tok, tok, {"task": None})


def long_text(n: int) -> str:
    """``n`` characters of plain English-like text: ``n`` tokens for the character tokenizer of
    :func:`opus_shaped_checkpoint` (no end token is added to a source)."""
    base = "the quick brown fox jumps over the lazy dog, then naps. "
    return (base * (n // len(base) + 1))[:n].rstrip().ljust(n, "s")


#: The layer/head menus a browser case changes, per kind of model (a decoder-only page
#: draws its one causal self-attention only).
MENUS = {
    "encoder-decoder": (("#heatmap-cross .av-headsel", ["H0", "all heads", "mean", "H1"]),
                        ("#heatmap-decoder_self .av-layer", ["0", "1", "0", "1"]),
                        ("#heatmap-encoder_self .av-headsel", ["H0", "mean", "H1", "mean"])),
    "decoder-only": (("#heatmap-decoder_self .av-headsel", ["H0", "all heads", "mean", "H1"]),
                     ("#heatmap-decoder_self .av-layer", ["0", "1", "0", "1"])),
}  # fmt: skip


def gpt2_shaped_checkpoint(folder: Path, max_len: int = 256, **shape) -> Path:
    """A random decoder-only model of GPT-2's shape (12 layers, d_model 768, 12 heads, d_ff
    3072, learned positions, pre-norm, GELU) with a character tokenizer, saved with
    :func:`attnviz.save_checkpoint` in ``folder``; its prompt is the text's characters."""
    import string

    from ..checkpoint import save_checkpoint
    from ..data.tokenizer import Tokenizer

    tok = Tokenizer("char", list(string.ascii_lowercase + " .,"))
    dims = dict(d_model=768, n_heads=12, n_decoder_layers=12, d_ff=3072)
    cfg = ModelConfig(len(tok), len(tok), **{**dims, **shape}, arch="decoder-only",
                      n_encoder_layers=0, positions="learned", norm_first=True, final_norm=True,
                      activation="gelu", scale_embeddings=False, dropout=0.0, max_len=max_len)  # fmt: skip
    torch.manual_seed(0)
    return save_checkpoint(folder, Transformer(cfg).eval(), tok, tok, {"task": None})


def _browser_case(
    page, url: str, model: str, text: str, steps: int, kind: str = "encoder-decoder"
) -> dict[str, list[float]]:
    """Step ``steps`` times, then Back, scrub and layer/head changes; ms per action."""
    page.goto(url)
    page.wait_for_function("() => document.querySelector('#model-info')?.innerText.includes('running on')", timeout=60_000)  # fmt: skip
    page.wait_for_function("() => window.AttnViz && document.querySelector('.av-root')")
    page.locator("#input-text textarea").fill(text)
    ref = session.start(session.new_state(model), text)
    outs = [""]  # the output after i Steps (stepped only as far as the page will go)
    while len(outs) <= steps and not ref.state.done:
        ref = session.step(ref.state)
        outs.append(ref.output)
    steps = len(outs) - 1
    times: dict[str, list[float]] = {"step": [], "back": [], "scrub": [], "layer/head": []}
    sizes: list[int] = []
    page.evaluate("() => performance.clearResourceTimings()")
    for i in range(1, steps + 1):
        times["step"].append(page.evaluate(_CLICK, ["#step-btn", i, outs[i], None]))
        sizes.append(sum(page.evaluate(_BYTES)))  # every response of this Step
        page.evaluate("() => performance.clearResourceTimings()")
    first_step = times["step"].pop(0)  # starts the input: encoder rows, not a step's
    for i in range(steps - 1, max(steps - 11, 0), -1):
        times["back"].append(page.evaluate(_CLICK, ["#back-btn", i, outs[i], None]))
    for i in [steps, 1, steps // 2, steps - 1, 2, steps] * 2:
        if i != page.evaluate("() => window.AttnViz.drawn.step"):
            times["scrub"].append(page.evaluate(_CLICK, [None, i, outs[i], "scrub"]))
    here = page.evaluate("() => window.AttnViz.drawn.step")
    for sel, values in MENUS[kind]:
        for v in values:
            times["layer/head"].append(page.evaluate(_CLICK, [sel, here, outs[here], v]))
    heap = _heap(page)
    return {**times, "bytes": [float(s) for s in sizes[1:]], "first": [first_step],
            "first_bytes": [float(sum(sizes[:1]))], **heap,
            "outputs": outs}  # fmt: skip


def _heap(page) -> dict[str, list[float]]:
    """The page's JS heap in bytes, as it is and after a garbage collection (DevTools)."""
    cdp = page.context.new_cdp_session(page)
    before = cdp.send("Runtime.getHeapUsage")["usedSize"]
    cdp.send("HeapProfiler.collectGarbage")
    after = cdp.send("Runtime.getHeapUsage")["usedSize"]
    cdp.detach()
    return {"heap": [float(before)], "heap_gc": [float(after)]}


def bench_browser(quick: bool) -> list[Row]:
    """Click -> redrawn medians in headless Chromium (Step, Back, scrub, layer/head), and the
    bytes the page receives per Step, on models/reverse (20 chars) and an opus-mt-shaped
    random model (60 chars, and a 512-token source: its first Step, JS heap and first
    Step's bytes too)."""
    import shutil
    import tempfile

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return [Row("browser rows", float("nan"), "ms", "-", None, "skipped: playwright is not installed")]  # fmt: skip
    if not CHROMIUM.exists():
        return [Row("browser rows", float("nan"), "ms", "-", None, f"skipped: no {CHROMIUM}")]
    from ..app import ui

    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, app_threads():
        reverse = Path(tmp) / "reverse"  # a copy: a training run rewriting models/ can't interfere
        if (MODELS / "reverse" / "model.safetensors").is_file():
            shutil.copytree(MODELS / "reverse", reverse)
        cases = [("models/reverse, 20 chars", reverse, "abcdefghijklmnopqrst", 100, 200),
                 ("opus-mt-shaped random model, 60 chars",
                  opus_shaped_checkpoint(Path(tmp) / "opus-shaped"),
                  "the quick brown fox jumps over the lazy dog, then naps. again", 250, 500),
                 (LONG_CASE, opus_shaped_checkpoint(Path(tmp) / "opus-long", max_len=1040),
                  long_text(LONG_TOKENS), 100, 200),
                 (GPT2_CASE, gpt2_shaped_checkpoint(Path(tmp) / "gpt2-shaped", max_len=256),
                  long_text(200), 150, 300)]  # fmt: skip
        cases += _gemma_case()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)  # fmt: skip
            for name, model, text, target, must in cases:
                if not (Path(model).is_file() or (Path(model) / "model.safetensors").is_file()):
                    continue
                got_n = len(session.start(session.new_state(str(model)), text).state.src_ids)
                if name == LONG_CASE and got_n != LONG_TOKENS:
                    raise AssertionError(f"{name}: the text is {got_n} tokens, not {LONG_TOKENS}")
                demo = ui.build_app(str(model), "cpu")
                demo.queue(default_concurrency_limit=2)
                port = _free_port()
                demo.launch(prevent_thread_lock=True, **server.launch_kwargs(port=port))
                try:
                    ctx = browser.new_context(viewport={"width": 1400, "height": 1600})
                    page = ctx.new_page()
                    kind = "decoder-only" if name in (GPT2_CASE, GEMMA_CASE) else "encoder-decoder"
                    got = _browser_case(page, f"http://127.0.0.1:{port}/", str(model), text,
                                        12 if quick else 40, kind)  # fmt: skip
                    if model == reverse:  # force a token (the step view's candidates)
                        got["force"] = _force_clicks(page, 6, got["outputs"], 10 if quick else 20)
                    ctx.close()
                finally:
                    demo.close()
                for action in ("step", "back", "scrub", "layer/head"):
                    t = statistics.median(got[action])
                    rows.append(Row(f"browser click -> redrawn: {action}, {name}", t, "ms",
                                    f"<= {target} (must <= {must})", t <= target,
                                    f"max {max(got[action]):.0f} ms over {len(got[action])}"))  # fmt: skip
                if got.get("force"):
                    t = statistics.median(got["force"])
                    rows.append(Row(f"browser force a token: click -> redrawn, {name}", t, "ms",
                                    "<= 150", t <= 150,
                                    f"max {max(got['force']):.0f} ms over {len(got['force'])} "
                                    "clicks on a candidate"))  # fmt: skip
                b = got["bytes"]
                rows.append(Row(f"browser bytes per Step, {name}", statistics.median(b) / 1024, "KB",
                                "grows with one row per layer & head", None,
                                f"first Step (encoder rows too) {got['first'][0]:.0f} ms; "
                                f"per Step {min(b) / 1024:.1f}-{max(b) / 1024:.1f} KB"))  # fmt: skip
                if name == LONG_CASE:
                    rows += _long_rows(got)
            browser.close()
    return rows


LONG_TOKENS = 512
GEMMA_TOKENS = 200
GEMMA_CASE = f"the real Gemma 3 270M (GGUF, Q4_K_M), {GEMMA_TOKENS}-token prompt"


def _gemma_case() -> list[tuple]:
    """The real Gemma 3 270M stepping a prompt of :data:`GEMMA_TOKENS` tokens (none without
    its package): Step <= 200 ms from the click to the redrawn page."""
    from ..checkpoint import load_checkpoint
    from ..interop.gguf.packaged import assemble_gemma3, gemma3_path

    if gemma3_path() is None:
        return []
    path = str(assemble_gemma3())
    tok = load_checkpoint(path).src_tokenizer
    words = long_text(8 * GEMMA_TOKENS).split(" ")
    while len(tok.encode(" ".join(words)).ids) > GEMMA_TOKENS:  # <bos> included
        words.pop()
    return [(GEMMA_CASE, path, " ".join(words), 200, 400)]


LONG_CASE = f"opus-mt-shaped random model, {LONG_TOKENS} tokens"
GPT2_CASE = "GPT-2-shaped decoder-only random model (12 x 768), 200-token prompt"


def _long_rows(got: dict[str, list[float]]) -> list[Row]:
    """The long input's own rows: its first Step, the page's heap and the first payload."""
    first, heap, gc = got["first"][0], got["heap"][0] / 2**20, got["heap_gc"][0] / 2**20
    return [
        Row(f"browser click -> redrawn: first Step, {LONG_CASE}", first, "ms",
            "<= 1000 (must <= 2000)", first <= 1000,
            "starts the input: encoder, its shown layer/head, the first rows"),
        Row(f"browser JS heap after the steps, {LONG_CASE}", heap, "MB", "<= 200", heap <= 200,
            f"{gc:.0f} MB after a garbage collection"),
        Row(f"browser bytes of the first Step, {LONG_CASE}", got["first_bytes"][0] / 2**20, "MB",
            "-", None, "every encoder layer and head would be ~67 MB as base64"),
    ]  # fmt: skip


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
