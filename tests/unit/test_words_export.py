"""Exports follow the pieces | words switch: the library (``unit="words"``), the Export tab
(panels and the page's event wiring) and ``attnviz inspect --words``."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from attnviz.analysis import export
from attnviz.analysis.words import pool_words, word_index
from attnviz.app import session
from attnviz.app.pagetext import UNIT_JS
from attnviz.app.panels import export as export_panel
from attnviz.cli import main
from attnviz.core.errors import InputError

TEXT = "hello world"  # two source words on the character-level reversal model
SIDES = {"encoder_self": ("src", "src"), "decoder_self": ("tgt", "tgt"), "cross": ("tgt", "src")}


@pytest.fixture(scope="module")
def ins(reverse_ckpt) -> export.Inspection:
    return export.inspect_text(reverse_ckpt, TEXT)


def test_words_are_pool_words_of_the_recorded_weights(ins):
    idx = {"src": word_index(ins.src_tokens, "char"), "tgt": word_index(ins.tgt_tokens, "char")}
    assert idx["src"] == [0] * 5 + [1] * 6  # "hello", " world"
    assert ins.words()["src"] == ["hello", "world"] and ins.words()["tgt"][0] == "<bos>"
    pieces, words = ins.arrays(), ins.arrays("words")
    assert words.keys() == pieces.keys()
    for kind, layer in ins.trace.keys():
        q, k = SIDES[kind]
        w = ins.trace.numpy(kind, layer, "weights")[0]  # [H, Tq, Tk], the recorded weights
        m = ins.trace.numpy(kind, layer, "mask")[0, 0].astype(bool)
        want_w, want_m = pool_words(w, m, idx[q], idx[k])
        got_w, got_m = words[f"{kind}.{layer}.weights"], words[f"{kind}.{layer}.mask"]
        assert got_w.shape == (w.shape[0], max(idx[q]) + 1, max(idx[k]) + 1)
        np.testing.assert_array_equal(got_w, want_w)
        np.testing.assert_array_equal(got_m, want_m)
        live = ~got_m.all(-1)  # rows with any open cell sum to 1
        np.testing.assert_allclose(got_w.sum(-1)[:, live], 1, atol=1e-5)
        assert not got_w[:, got_m].any()  # nothing on a blocked word cell
    # decoder self-attention: <bos> sees only itself, so its cell over the later word is
    # blocked (every piece cell under it is); the later word sees <bos> (one piece cell open)
    dm = words["decoder_self.0.mask"]
    assert dm[0, 1] and not dm[1, 0] and not dm[1, 1]
    np.testing.assert_array_equal(words["probs"], pieces["probs"])  # per step, not pooled


def test_word_tokenizer_words_are_its_pieces(ins):
    same = dataclasses.replace(ins, src_kind="word", tgt_kind="word")
    for name, value in same.arrays().items():
        np.testing.assert_allclose(same.arrays("words")[name], value, atol=1e-6)


def test_files_say_words_and_map_back(ins, tmp_path):
    data = json.loads(export.write_json(ins, tmp_path / "w.json", "words").read_text())
    assert data["unit"] == "words" and data["src_words"] == ["hello", "world"]
    assert data["src_word_index"] == word_index(ins.src_tokens, "char")
    assert len(data["tgt_word_index"]) == len(data["tgt_tokens"])
    assert np.asarray(data["attention"]["cross.1.weights"]).shape[1:] == (
        len(data["tgt_words"]),
        len(data["src_words"]),
    )
    z = np.load(export.write_npz(ins, tmp_path / "w.npz", "words"), allow_pickle=False)
    assert str(z["unit"]) == "words" and list(z["src_words"]) == ["hello", "world"]
    assert list(z["tgt_word_index"]) == data["tgt_word_index"]
    np.testing.assert_array_equal(z["cross.1.weights"], ins.arrays("words")["cross.1.weights"])
    with pytest.raises(InputError, match="pieces or words"):
        export.write_json(ins, tmp_path / "x.json", "letters")


def test_pieces_export_is_unchanged(ins, tmp_path):
    default = export.write_json(ins, tmp_path / "a.json").read_bytes()
    assert export.write_json(ins, tmp_path / "b.json", "pieces").read_bytes() == default
    data = json.loads(default)
    assert list(data) == [
        "checkpoint", "text", "output", "src_tokens", "unknown", "out_tokens", "tgt_tokens",
        "top_next_tokens", "attention", "head_stats",
    ]  # fmt: skip
    assert np.asarray(data["attention"]["cross.0.weights"]).shape[1:] == (
        len(ins.tgt_tokens),
        len(ins.src_tokens),
    )
    z = np.load(export.write_npz(ins, tmp_path / "a.npz"), allow_pickle=False)
    assert "unit" not in z.files and "src_words" not in z.files
    np.testing.assert_array_equal(z["cross.0.weights"], ins.arrays()["cross.0.weights"])


def test_html_report_draws_words(ins):
    from attnviz.render import report
    from attnviz.render.arrays import b64_f32

    page = report.inspection_page(ins, unit="words")
    assert "<title>attnviz: hello world · words</title>" in page
    specs = {s["kind"]: s for s in report.report_data(page) if s["type"] == "attention"}
    cross = specs["cross"]
    assert cross["keys"] == ["hello", "world"] and cross["title"].endswith("· words")
    assert cross["name"] == "cross-words"  # the figure's PNG/CSV/JSON files say words
    w, m = ins.word_attention("cross", 0)
    assert cross["layers"][0]["w"] == b64_f32(w) and len(cross["layers"][0]["m"]) == m.size
    assert specs["encoder_self"]["queries"] == ["hello", "world"]
    pieces = {s["kind"]: s for s in report.report_data(report.inspection_page(ins))
              if s["type"] == "attention"}  # fmt: skip
    assert len(pieces["cross"]["keys"]) == len(TEXT) and "words" not in pieces["cross"]["title"]
    assert "name" not in pieces["cross"]  # files named by kind, as before


# -- the app ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def state(models_dir) -> session.SessionState:
    done = session.run(session.new_state(str(models_dir / "reverse")), TEXT).state
    return session.goto(done, 4).state


def test_export_panel_follows_the_switch(state):
    words = export_panel.export(state, "json", "words")
    assert words.path.endswith("-step4-words.json") and "words" in words.message
    data = json.loads(Path(words.path).read_text())
    assert data["unit"] == "words" and len(data["out_tokens"]) == 4
    npz = export_panel.export(state, "npz", "words")
    assert npz.path.endswith("-step4-words.npz") and str(np.load(npz.path)["unit"]) == "words"
    pieces = export_panel.export(state, "json")
    assert pieces.path.endswith("-step4.json") and "unit" not in json.loads(
        Path(pieces.path).read_text()
    )
    html = export_panel.export(state, "html", "words")
    assert (
        html.path.endswith("-step4-words.html") and "· words</title>" in Path(html.path).read_text()
    )
    bad = export_panel.export(state, "json", "letters")
    assert bad.path is None and bad.message == "⚠ export pieces or words, not &#x27;letters&#x27;"


def test_page_export_buttons_pass_the_switch(models_dir):
    from attnviz.app import ui  # the only gradio import

    demo = ui.build_app(str(models_dir / "reverse"), "cpu")
    cfg = demo.get_config_file()
    elem = {c["id"]: c.get("props", {}).get("elem_id") for c in cfg["components"]}
    seen = {}
    for dep in cfg["dependencies"]:
        for target, _ in dep["targets"]:
            if elem.get(target) in ("export-json", "export-npz", "export-html"):
                seen[elem[target]] = dep
    assert set(seen) == {"export-json", "export-npz", "export-html"}
    st = session.run(session.new_state(str(models_dir / "reverse")), TEXT).state
    for name, dep in seen.items():
        assert dep["js"] == UNIT_JS and elem[dep["inputs"][-1]] == "export-unit"
        if name == "export-json":  # the event's own function, with what UNIT_JS hands it
            path, message, _ = demo.fns[dep["id"]].fn(st, {}, "words")
            assert path.endswith("-words.json") and "words" in message


@pytest.mark.parametrize(
    "av, selected, want",
    [(None, "words", "words"), (None, "pieces", "pieces"), (None, None, "pieces"),
     ("words", "pieces", "words")],
)  # fmt: skip
def test_unit_js_reads_the_switch(av, selected, want):
    """UNIT_JS hands the page's switch (AttnViz.unit(), else #unit-select) to the event."""
    node = shutil.which("node")
    if not node:
        pytest.skip("no node to run the page snippet")
    sel = "null" if selected is None else json.dumps({"value": selected})
    unit = "{}" if av is None else f"{{ AttnViz: {{ unit: () => {json.dumps(av)} }} }}"
    script = (
        f"globalThis.window = {unit}; globalThis.document = {{ querySelector: () => ({sel}) }};"
        f"console.log(JSON.stringify(({UNIT_JS})('state', {{}}, 'pieces')));"
    )
    out = subprocess.run([node, "-e", script], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == ["state", {}, want]


def test_cli_inspect_words(models_dir, tmp_path, capsys):
    out = tmp_path / "w.json"
    args = ["inspect", str(models_dir / "reverse"), "--text", TEXT, "--json", str(out)]
    assert main([*args, "--npz", str(tmp_path / "w.npz"), "--words"]) == 0
    assert json.loads(out.read_text())["src_words"] == ["hello", "world"]
    assert str(np.load(tmp_path / "w.npz")["unit"]) == "words"
    assert main(["inspect", str(models_dir / "reverse"), "--text", TEXT, "--words"]) == 2
    assert capsys.readouterr().err.strip().endswith("--words goes with --json, --npz or --html")
