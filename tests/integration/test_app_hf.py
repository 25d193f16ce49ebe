"""The app on a Hugging Face folder: the model menu, a zipped upload, the served API, a browser.

A tiny random Marian model with a sentencepiece tokenizer trained here (nothing is downloaded)
is saved with ``save_pretrained``; the app must decode exactly what transformers' greedy
``generate`` decodes, and show the tokenizer's pieces as heatmap labels.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install 'attnviz[hf]')"
)
pytest.importorskip("sentencepiece", reason="sentencepiece is not installed")

from helpers import launched_app

from attnviz.app import session, store  # noqa: E402  (after the skips)

TEXTS = ["the cat sat on the mat", "a dog ran in the park"]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    """``(folder, {text: transformers' greedy text}, {text: source pieces})``."""
    from tests import hf_families

    root = tmp_path_factory.mktemp("hf-app")
    tok = hf_families.marian_tokenizer(root / "tok")
    hf_model = hf_families.build(
        "marian",
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        decoder_start_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    hf_model.generation_config.max_new_tokens = 10
    hf_model.generation_config.bad_words_ids = [[tok.pad_token_id]]
    folder = root / "opus-mt-tiny"
    hf_model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    expected, pieces = {}, {}
    for text in TEXTS:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = hf_model.generate(**enc, num_beams=1, do_sample=False)
        expected[text] = tok.decode(out[0], skip_special_tokens=True)
        pieces[text] = tok.convert_ids_to_tokens(enc.input_ids[0])
    assert all(expected.values()), expected  # the comparison must be about real text
    return folder, expected, pieces


def _zip(folder: Path, dest: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(dest, "w") as z:
        for f in sorted(folder.iterdir()):
            z.write(f, f"{folder.name}/{f.name}")  # one folder level, as zipping a folder does
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return dest


def _run(state, text):
    view = session.run(session.start(state, text).state, text)
    assert view.info["done"], view.message
    return view


def test_hf_folders_are_in_the_model_menu(marian, tmp_path):
    folder = marian[0]
    root = tmp_path / "models"
    root.mkdir()
    shutil.copytree(folder, root / "opus-mt-tiny")
    sharded = root / "sharded"  # config + an index (shards beside it): listed too
    sharded.mkdir()
    shutil.copy(folder / "config.json", sharded)
    (sharded / store.HF_INDEX).write_text(json.dumps({"weight_map": {}}))
    (root / "half-written").mkdir()
    shutil.copy(folder / "config.json", root / "half-written")
    assert list(store.shipped_models(root)) == ["opus-mt-tiny", "sharded"]
    assert store.model_name(folder) in store.menu(folder)
    assert store.resolve_model(store.model_name(folder)) == str(folder.resolve())


def test_the_session_decodes_what_transformers_generates(marian):
    folder, expected, pieces = marian
    state = session.new_state(str(folder))
    for text in TEXTS:
        started = session.start(state, text)
        assert started.payload["src"] == pieces[text]  # the tokenizer's pieces label the keys
        assert _run(state, text).output == expected[text]


def test_a_zipped_hf_folder_uploads(marian, tmp_path):
    folder, expected, _ = marian
    zpath = _zip(folder, tmp_path / "opus-mt-tiny.zip", {"README.md": b"ignored"})
    state = session.new_state(str(folder))
    view = session.upload_model(state, [str(zpath)], TEXTS[0])
    assert "⚠" not in view.message, view.message
    up = Path(view.state.model)
    assert up != folder and up.name == "opus-mt-tiny"
    assert sorted(p.name for p in up.iterdir()) == sorted(
        p.name for p in folder.iterdir()
    )  # every file kept, flat; README.md left out
    assert store.model_name(up) in store.menu(up)  # its own session's menu
    assert _run(view.state, TEXTS[0]).output == expected[TEXTS[0]]


def test_loose_hf_files_upload(marian):
    folder, expected, _ = marian
    view = session.upload_model(session.new_state(str(folder)), [str(p) for p in folder.iterdir()])
    assert "⚠" not in view.message, view.message
    assert _run(view.state, TEXTS[1]).output == expected[TEXTS[1]]


@pytest.mark.parametrize(
    "extra, why",
    [
        ({"opus/pytorch_model.bin": b"\x80\x04"}, "pytorch_model.bin is a pickle"),
        (
            {"x/model.safetensors.index.json": b'{"weight_map": {"a": "../evil.safetensors"}}'},
            "not a plain file name",
        ),
        (
            {"x/model.safetensors.index.json": b'{"weight_map": {"a": "model-2.safetensors"}}'},
            "lacks the shard model-2.safetensors",
        ),
    ],
)
def test_bad_hf_uploads_are_refused_in_one_line(marian, tmp_path, extra, why):
    folder = marian[0]
    zpath = _zip(folder, tmp_path / "bad.zip", extra)
    state = session.start(session.new_state(str(folder)), TEXTS[0]).state
    view = session.upload_model(state, [str(zpath)])
    assert why in view.message and "\n" not in view.message
    assert view.state.model == state.model and view.state.started  # nothing lost


def test_a_zipped_hf_folder_without_weights_is_refused(marian, tmp_path):
    folder = marian[0]
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in folder.iterdir():
        if f.name != "model.safetensors":
            shutil.copy(f, bare)
    view = session.upload_model(
        session.new_state(str(folder)), [str(_zip(bare, tmp_path / "b.zip"))]
    )
    assert "holds no model.safetensors" in view.message


@pytest.mark.slow
def test_the_served_app_start_run_equal_generate(marian):
    pytest.importorskip("gradio")
    gradio_client = pytest.importorskip("gradio_client")
    folder, expected, _ = marian
    with launched_app(folder) as (_, port):
        client = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        for text in TEXTS:
            out = client.predict(text, api_name="/start")
            assert out[0] == "" and out[3]["info"]["step"] == 0
            out = client.predict(text, api_name="/run")
            assert out[0] == expected[text] and out[3]["info"]["done"]


@pytest.mark.slow
def test_the_page_steps_an_hf_folder(marian):
    from helpers import CHROMIUM as chromium

    if not chromium.exists():
        pytest.skip(f"{chromium} is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("gradio")
    from attnviz.bench.suite import CHROMIUM_ARGS

    folder, expected, pieces = marian
    text = TEXTS[0]
    state, outs = session.start(session.new_state(str(folder)), text).state, []
    for _ in range(3):  # what the page must show after each Step
        view = session.step(state, text)
        state = view.state
        outs.append(view.output)
    with launched_app(folder) as (_, port), sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.set_default_timeout(30_000)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function(
            "() => document.querySelector('#model-info')?.innerText.includes('running on')"
        )
        page.wait_for_function("() => window.AttnViz && document.querySelector('.av-root')")
        picker = page.locator("#model-picker input").input_value()
        assert picker == "opus-mt-tiny"
        page.locator("#input-text textarea").fill(text)
        for n, want in enumerate(outs, start=1):
            page.locator("#step-btn").click()
            page.wait_for_function(f"() => window.AttnViz.drawn.step === {n}")
            page.wait_for_function(
                "(o) => document.querySelector('#output-text textarea').value === o", arg=want
            )
            for kind in ("encoder_self", "decoder_self", "cross"):
                assert page.locator(f"#heatmap-{kind} canvas").is_visible()
            assert f"step {n}" in page.locator("#heatmap-cross .av-title").inner_text()
        keys = page.evaluate("() => document.querySelector('#heatmap-cross canvas')._av[0].mat.xl")
        assert keys == pieces[text]
        browser.close()
        assert errors == []
