"""Helpers the tests import (``from helpers import make_model``): tiny random models, batches,
the character tasks' ids, a free port and the app launched in-process."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest
import torch

import attnviz

MODELS = Path(__file__).resolve().parent.parent / "models"


def make_model(seed: int = 0, **overrides) -> attnviz.Transformer:
    """A tiny random model in eval mode with dropout off."""
    base = dict(
        src_vocab_size=23,
        tgt_vocab_size=19,
        d_model=24,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=40,
        dropout=0.0,
        max_len=200,
    )
    base.update(overrides)
    torch.manual_seed(seed)
    return attnviz.Transformer(attnviz.ModelConfig(**base)).eval()


def random_batch(model: attnviz.Transformer, b: int = 3, ts: int = 7, tt: int = 6, seed: int = 1):
    """Source/target ids (ids >= 3) with PAD (0) at the end of some source and target rows."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    src = torch.randint(3, cfg.src_vocab_size, (b, ts), generator=g)
    tgt = torch.randint(3, cfg.tgt_vocab_size, (b, tt), generator=g)
    if b > 1:
        src[1, ts - 3 :] = cfg.pad_id
        tgt[1, tt - 2 :] = cfg.pad_id
    return src, tgt, src == cfg.pad_id, tgt == cfg.pad_id


def letters(text: str) -> list[int]:
    """a-z text -> ids of the character tasks (reverse, copy, sort)."""
    return attnviz.tasks.get_task("reverse").tokenizers()[0].encode(text).ids


def unletters(ids) -> str:
    """Ids of the character tasks -> text (stops at EOS)."""
    return attnviz.tasks.get_task("reverse").tokenizers()[1].decode(ids)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launched_app(model: str | Path | None = None, **build):
    """The app on ``model`` (default models/reverse), launched in this process on a free
    port; yields ``(demo, port)`` and closes it afterwards."""
    from attnviz.app import server, ui

    demo = ui.build_app(str(model or MODELS / "reverse"), "cpu", **build)
    demo.queue()
    port = free_port()
    demo.launch(prevent_thread_lock=True, **server.launch_kwargs(port=port))
    try:
        yield demo, port
    finally:
        demo.close()


from attnviz.bench.rows import CHROMIUM  # noqa: E402  (the one place its path is written)


def browser_or_skip():
    """Skip the calling test module unless Chromium, Playwright and gradio are installed; the
    ``playwright.sync_api`` module otherwise (call at module level, before app imports)."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True
        )
    api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    pytest.importorskip("gradio")
    return api


def small_long_checkpoint(folder: Path) -> Path:
    """A small random model whose positions take a long input (700), with the opus-mt-shaped
    model's character tokenizer (:func:`attnviz.bench.app.opus_shaped_checkpoint`)."""
    from attnviz.bench.app import opus_shaped_checkpoint

    shape = dict(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64)
    return opus_shaped_checkpoint(folder, max_len=700, **shape)


def stepped_page(browser, url: str, text: str, steps: int, timeout_ms: int, **context):
    """A new page on the app at ``url``: ``text`` typed and Stepped ``steps`` times, each Step
    waited for until drawn; ``page.errors`` collects the page's errors."""
    page = browser.new_page(viewport={"width": 1400, "height": 1600}, **context)
    page.set_default_timeout(timeout_ms)
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    page.wait_for_function("() => window.AttnViz && document.querySelector('.av-root')")
    page.wait_for_function("() => document.querySelector('#model-info')?.innerText.includes('running on')")  # fmt: skip
    page.locator("#input-text textarea").fill(text)
    for i in range(1, steps + 1):
        page.locator("#step-btn").click()
        page.wait_for_function(f"() => window.AttnViz.drawn.step === {i}")
    return page


def open_app_page(browser, url: str, timeout_ms: int, **context):
    """A new page on the app at ``url``, the model loaded and the canvas renderer ready;
    ``page.errors`` collects the page's errors."""
    page = browser.new_page(viewport={"width": 1400, "height": 1600}, **context)
    page.set_default_timeout(timeout_ms)
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    page.wait_for_function(
        "() => document.querySelector('#model-info')?.innerText.includes('running on')"
    )
    page.wait_for_function("() => window.AttnViz && document.querySelector('.av-root')")
    return page


def shots_folder(tmp_path: Path) -> Path:
    """Where a test writes the files the README shows (screenshots, load-test numbers): the
    folder ``ATTNVIZ_SHOTS`` names (``ATTNVIZ_SHOTS=assets`` remakes the README's), else the
    test's own temporary folder. The suite never writes into tracked files on its own."""
    import os

    folder = Path(os.environ["ATTNVIZ_SHOTS"]) if os.environ.get("ATTNVIZ_SHOTS") else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def tracked_changes(root: Path) -> dict[str, str] | None:
    """Tracked files under ``root`` whose content differs from the last commit, each with a
    hash of what is on disk now ("" when deleted); None outside a git checkout."""
    import hashlib
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None:
        return None
    out = subprocess.run(
        [git, "diff", "--name-only", "HEAD"], cwd=root, capture_output=True, text=True
    )
    if out.returncode != 0:
        return None
    changed = {}
    for name in out.stdout.splitlines():
        path = root / name
        changed[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    return changed


#: WCAG contrast of every visible text and mark on the page (or under a selector): each element
#: with text of its own (an HTML element's text nodes, an SVG ``text``'s fill), its colour (with
#: the opacity of it and its ancestors) composited over its real background — every ancestor's
#: background colour, semi-transparent ones included, laid over the page's. Plotly figures
#: (their own light/dark templates, text over plot cells) and canvases are left out.
#: Returns ``[[text, contrast, selector-ish path, colours], ...]``.
ALL_CONTRAST = """(sel) => {
  const rgba = (s) => { const m = (s || '').match(/[\\d.]+/g) || [];
    return m.length < 3 ? [0, 0, 0, 0] : [+m[0], +m[1], +m[2], m.length > 3 ? +m[3] : 1]; };
  const over = (top, bot) => [0, 1, 2].map((i) => top[i] * top[3] + bot[i] * (1 - top[3])).concat([1]);
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bg = (el) => { const chain = []; for (let e = el; e; e = e.parentElement) chain.push(e);
    let c = [255, 255, 255, 1];
    for (const e of chain.reverse()) { const x = rgba(getComputedStyle(e).backgroundColor); if (x[3] > 0) c = over(x, c); }
    return c; };
  const opacity = (el) => { let o = 1; for (let e = el; e; e = e.parentElement) o *= +getComputedStyle(e).opacity; return o; };
  const name = (el) => el.id ? '#' + el.id : el.tagName.toLowerCase() + (el.classList.length ? '.' + [...el.classList].join('.') : '');
  const path = (el) => { const out = []; for (let e = el; e && out.length < 3; e = e.parentElement) { out.push(name(e)); if (e.id) break; } return out.reverse().join(' > '); };
  const out = [];
  for (const el of (sel ? document.querySelectorAll(sel) : [document.body]))
    for (const e of [el, ...el.querySelectorAll('*')]) {
      if (e.closest('.js-plotly-plot, canvas, script, style, option, .av-hidden')) continue;
      const own = [...e.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('').trim();
      if (!own || !e.getClientRects().length) continue;
      const cs = getComputedStyle(e);
      if (cs.visibility === 'hidden' || cs.display === 'none') continue;
      const r = e.getBoundingClientRect(); if (r.width < 1 || r.height < 1) continue;
      const back = bg(e), svg = e instanceof SVGElement;
      const fg = rgba(svg ? cs.fill : cs.color); fg[3] *= opacity(e);
      const a = lum(over(fg, back)), b = lum(back);
      out.push([own.slice(0, 30), Math.round(((Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)) * 100) / 100, path(e),
                (svg ? cs.fill : cs.color) + ' on ' + back.slice(0, 3).map(Math.round).join(',')]);
    }
  return out;
}"""

#: True once no event is running: Gradio shows a status tracker (``.wrap`` of the ``default``
#: or ``center`` variant, not ``.hide``) on the outputs of an event in progress.
SETTLED = "() => !document.querySelector('.wrap.default:not(.hide), .wrap.center:not(.hide)')"


BERT_CORPUS = ["the cat sat on the mat", "a dog ran to the park", "the bird flew over the house",
               "my friend reads a book", "the sun is warm today"] * 20  # fmt: skip


def tiny_bert(folder: str | Path):
    """A tiny random BertForMaskedLM with a WordPiece tokenizer trained here, saved into
    ``folder`` as transformers saves them; returns ``(model, tokenizer)`` (skips without
    transformers or tokenizers)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        BERT_CORPUS, trainers.WordPieceTrainer(vocab_size=80, special_tokens=specials)
    )
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )  # fmt: skip
    fast = transformers.BertTokenizerFast(tokenizer_object=tok, unk_token="[UNK]",
                                          sep_token="[SEP]", pad_token="[PAD]",
                                          cls_token="[CLS]", mask_token="[MASK]")  # fmt: skip
    config = transformers.BertConfig(vocab_size=len(fast), hidden_size=32, intermediate_size=48,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     max_position_embeddings=64, pad_token_id=0)  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    fast.save_pretrained(folder)
    return model, fast


def stepped_state(folder: str | Path, text: str, n: int):
    """An app session on ``folder`` started on ``text`` and stepped ``n`` times."""
    from attnviz.app import session

    s = session.start(session.new_state(str(folder)), text).state
    for _ in range(n):
        s = session.step(s).state
    return s


def permuted_checkpoint(
    ckpt: attnviz.Checkpoint, perm: list[int], specials: dict, folder
) -> attnviz.Checkpoint:
    """A copy of ``ckpt`` whose new id k is old id ``perm[k]`` on both sides."""
    from attnviz.data.tokenizer import Tokenizer

    cfg = ckpt.config
    assert cfg.src_vocab_size == cfg.tgt_vocab_size == len(perm)
    ids = {f"{role}_id": i for role, i in specials.items()}
    new_cfg = attnviz.ModelConfig.from_dict({**cfg.to_dict(), **ids})
    model = attnviz.Transformer(new_cfg).eval()
    state = {k: v.clone() for k, v in ckpt.model.state_dict().items()}
    index = torch.tensor(perm)
    for name in ("src_embed.weight", "tgt_embed.weight", "generator.weight", "generator.bias"):
        state[name] = state[name][index]
    model.load_state_dict(state)
    toks = [
        Tokenizer.from_vocab(tok.kind, [tok.tokens[old] for old in perm], specials)
        for tok in (ckpt.src_tokenizer, ckpt.tgt_tokenizer)
    ]
    attnviz.save_checkpoint(folder, model, *toks, dict(ckpt.meta))  # task, history, ...
    return attnviz.load_checkpoint(folder)


#: The permuted vocabularies of the special-id tests: ``tutorial`` (the PyTorch tutorial's
#: UNK 0, PAD 1, BOS 2, EOS 3) and ``start_is_pad`` (the start id is the pad id, as in T5).
PERMUTATIONS = ("tutorial", "start_is_pad")


def permuted_case(name: str, base: attnviz.Checkpoint, folder) -> tuple:
    """``(name, permuted copy of base, perm)`` with ``perm[new id] = old id``; the letters go
    in reverse order after the specials."""
    letters = list(range(4, base.config.tgt_vocab_size))[::-1]
    if name == "tutorial":
        perm = [3, 0, 1, 2, *letters]  # UNK 0, PAD 1, BOS 2, EOS 3
        specials = {"pad": 1, "bos": 2, "eos": 3, "unk": 0}
    else:
        perm = [1, 2, 3, 0, *letters]  # start(=pad) 0, EOS 1, UNK 2; old PAD: a spare token
        specials = {"pad": 0, "bos": 0, "eos": 1, "unk": 2}
    return name, permuted_checkpoint(base, perm, specials, folder), perm


# -- fixtures shared by a unit module and the integration module its slow tests moved to ---------
#: The decoder-only app tests' prompt (models/induction's symbols).
INDUCTION_PROMPT = "qXb3LmZ7tRw2Kp9"


@pytest.fixture(scope="module", name="base")
def base_fixture(models_dir):
    """The shipped reversal model, the special-id tests' base."""
    return attnviz.load_checkpoint(models_dir / "reverse")


@pytest.fixture(scope="module", params=PERMUTATIONS, name="case")
def case_fixture(request, base, tmp_path_factory):
    """(name, permuted checkpoint, perm) with perm[new id] = old id."""
    return permuted_case(request.param, base, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module", name="induction")
def induction_fixture(models_dir):
    return str(models_dir / "induction")


@pytest.fixture(scope="module", name="stepped")
def stepped_fixture(induction):
    """models/induction's session stepped three times after :data:`INDUCTION_PROMPT`."""
    return stepped_state(induction, INDUCTION_PROMPT, 3)


@pytest.fixture(scope="module", name="ckpt")
def reverse_fixture(models_dir):
    """The shipped reversal model as the app's store holds it."""
    from attnviz.app import store

    return store.get_checkpoint(str(models_dir / "reverse"), "cpu")


def zipped(folder: Path, zpath: Path) -> str:
    """``folder``'s files (not its subfolders) in one zip at ``zpath``, as a user uploads a
    checkpoint folder; the zip's path."""
    import zipfile

    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for f in folder.iterdir():
            if f.is_file():
                z.write(f, f.name)
    return str(zpath)


def why_results(state, corrupted: str) -> dict:
    """The Why tab's patching grid (heads, noising, answer ``f`` against ``x``), flow graph
    and lens grid for ``state``, kept as the page keeps them: panel key -> ``(stamp, result)``."""
    from attnviz.app import state as stamps
    from attnviz.app.panels import why, why_routes

    grid = why.patching(state, corrupted, "f", "x", "heads", "noising")
    graph = why_routes.flow_graph(state, 0.04)
    lens = why.grid(state)  # the lens panel's whole grid
    now = stamps.panel_stamps(state)
    return {"why_patch": (now["why_patch"], grid.result),
            "why_flow": (now["why_flow"], graph.result),
            "why_lens": (now["why_lens"], lens.result)}  # fmt: skip
