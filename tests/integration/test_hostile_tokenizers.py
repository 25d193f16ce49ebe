"""Hostile tokenizer JSON: a checkpoint's stored ``tokenizers`` JSON or a Hugging Face folder's
``tokenizer.json`` is data, never trusted. Padding of 10^8 (a Rust abort), user regexes that
panic or run for minutes, and 100,000-character inputs are refused in one line; a panic from
Rust is one AttnvizError line; the app serves other sessions while one request is slow."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import attnviz
from attnviz.checkpoint import WEIGHTS, read_tensors, write_tensors
from attnviz.core.config import ModelConfig
from attnviz.core.errors import AttnvizError, InputError
from attnviz.data.tokenizer import CHARS_PER_TOKEN, MAX_TEXT_CHARS, check_text, train_tokenizer
from attnviz.data.tokenizer_checks import rust_panics

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["hello world", "the cat sat on the mat", "a dog and a cat"] * 10
SPLIT = {"type": "Split", "behavior": "Isolated", "invert": False}
HOSTILE = {
    "padding": {
        "padding": {
            "strategy": {"Fixed": 100_000_000},
            "direction": "Right",
            "pad_to_multiple_of": None,
            "pad_id": 0,
            "pad_type_id": 0,
            "pad_token": "<pad>",
        }
    },  # fmt: skip
    "truncation": {
        "truncation": {
            "direction": "Right",
            "max_length": 1,
            "strategy": "LongestFirst",
            "stride": 0,
        }
    },  # fmt: skip
    "panicking regex": {"pre_tokenizer": {**SPLIT, "pattern": {"Regex": "(a+)+$"}}},
    "slow regex": {"pre_tokenizer": {**SPLIT, "pattern": {"Regex": r"\w*\d"}}},
    "added token": {
        "added_tokens": [
            {
                "id": 5,
                "content": "a",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": True,
                "special": False,
            }
        ]
    },  # fmt: skip
    "bpe dropout": {"model": {"dropout": 0.5}},
    "replace regex": {
        "normalizer": {"type": "Replace", "pattern": {"Regex": "(a|a)*$"}, "content": "b"}
    },  # fmt: skip
}


def _subword_checkpoint(folder: Path, kind: str = "bpe", **changes) -> Path:
    """A tiny checkpoint with a trained ``kind`` tokenizer whose stored JSON is then changed."""
    tok = train_tokenizer(kind, TEXTS, vocab_size=40)
    torch.manual_seed(0)
    cfg = ModelConfig(len(tok), len(tok), d_model=16, n_heads=2, d_ff=32, max_len=40)
    attnviz.save_checkpoint(folder, attnviz.Transformer(cfg).eval(), tok, tok, {"task": None})
    if changes:
        tensors, meta = read_tensors(folder / WEIGHTS)
        for side in ("src_tokenizer", "tgt_tokenizer"):
            hf = meta[side]["hf"]
            for key, value in changes.items():
                if key == "model":
                    hf["model"].update(value)
                else:
                    hf[key] = value
        write_tensors(folder / WEIGHTS, tensors, meta)
    return folder


_CHILD = """
import json, sys, time
import attnviz
out = {}
for folder in sys.argv[1:]:
    start = time.perf_counter()
    try:
        ckpt = attnviz.load_checkpoint(folder)
        ckpt.predict("a" * 30 + "!")
        out[folder] = {"error": None}
    except BaseException as exc:
        out[folder] = {"error": type(exc).__name__, "message": str(exc),
                       "attnviz": isinstance(exc, attnviz.AttnvizError)}
    out[folder]["seconds"] = time.perf_counter() - start
print(json.dumps(out))
"""


def test_stored_tokenizer_json_is_checked_before_rust_sees_it(tmp_path):
    """Each hostile JSON is refused on load, in a child process (before the fix, padding
    aborted it and the regexes panicked or ran on)."""
    folders = {name: _subword_checkpoint(tmp_path / name.replace(" ", "_"), **changes)
               for name, changes in HOSTILE.items()}  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, folders.values())],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    for name, folder in folders.items():
        result = results[str(folder)]
        assert result["error"] == "CheckpointError", (name, result)
        assert "\n" not in result["message"] and result["seconds"] < 20, (name, result)
    assert "never pads" in results[str(folders["padding"])]["message"]
    assert "never truncates" in results[str(folders["truncation"])]["message"]


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_attnviz_own_subword_tokenizers_still_load(tmp_path, kind):
    ckpt = attnviz.load_checkpoint(_subword_checkpoint(tmp_path / "ck", kind))
    assert ckpt.src_tokenizer.decode(ckpt.src_tokenizer.encode("the cat").ids) == "the cat"


def test_a_long_input_is_refused_before_it_is_tokenized(tmp_path, monkeypatch):
    """100,000 characters: refused from its length in characters, without tokenizing."""
    ckpt = attnviz.load_checkpoint(_subword_checkpoint(tmp_path / "ck"))
    calls = []
    encode = type(ckpt.src_tokenizer).encode
    monkeypatch.setattr(
        type(ckpt.src_tokenizer), "encode", lambda self, text: calls.append(1) or encode(self, text)
    )
    start = time.perf_counter()
    for call in (ckpt.predict, ckpt.stepper, lambda t: ckpt.score(t, "x")):
        with pytest.raises(InputError, match="100,000 characters") as info:
            call("a" * 100_000)
        assert "\n" not in str(info.value)
    assert time.perf_counter() - start < 1 and calls == []
    limit = ckpt.config.max_len * CHARS_PER_TOKEN
    with pytest.raises(InputError, match="the reference has"):
        ckpt.score("the cat", "a" * (limit + 1))
    ckpt.predict("a" * 30)  # a short input still runs
    with pytest.raises(InputError, match=f"at most {MAX_TEXT_CHARS:,} characters"):
        check_text("a" * (MAX_TEXT_CHARS + 1), 10**12)  # a relative-position model's max_len


@pytest.mark.parametrize("text", [None, 12345, b"bytes", ["a"]])
def test_predict_of_something_that_is_not_text_is_an_input_error(tmp_path, text):
    ckpt = attnviz.load_checkpoint(ROOT / "models" / "reverse")
    with pytest.raises(InputError, match="must be text") as info:
        ckpt.predict(text)
    assert "\n" not in str(info.value)


class PanicException(BaseException):
    """Stands in for ``pyo3_runtime.PanicException`` (what ``tokenizers`` raises on a panic)."""


def test_a_rust_panic_is_one_attnviz_error(tmp_path):
    failed = "reading text failed inside the tokenizers library"
    with pytest.raises(InputError, match=failed), rust_panics("reading text"):
        raise PanicException("Onig: Regex search error: retry-limit-in-match over")
    with pytest.raises(KeyboardInterrupt, match="^stop$"), rust_panics("reading text"):
        raise KeyboardInterrupt("stop")  # passes through as it is
    ckpt = attnviz.load_checkpoint(_subword_checkpoint(tmp_path / "ck"))

    class Panicking:
        def encode(self, *args, **kwargs):
            raise PanicException("boom")

        decode = encode

    ckpt.src_tokenizer._hf = Panicking()
    with pytest.raises(InputError, match="panic|tokenizers library") as info:
        ckpt.predict("the cat")
    assert "\n" not in str(info.value)
    with pytest.raises(AttnvizError, match="tokenizers library"):
        ckpt.src_tokenizer.decode([5, 6])


def test_the_cli_prints_a_panic_it_meets_in_one_line(monkeypatch, capsys):
    from attnviz.cli import commands as cli

    def panics(args):
        raise PanicException("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(cli, "_step_through", panics)
    assert cli.main(["step", "--text", "abc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err and "unwrap" in err
    with pytest.raises(PanicException, match=r"Option::unwrap\(\)"):  # --debug: it whole
        cli.main(["step", "--text", "abc", "--debug"])


def test_a_real_panic_from_a_regex_is_one_attnviz_error():
    """The panic the library really raises (``pyo3_runtime.PanicException``) is caught."""
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer(tokenizers.models.BPE())
    hf.pre_tokenizer = tokenizers.pre_tokenizers.Split(tokenizers.Regex("(a+)+$"), "isolated")
    with pytest.raises(InputError, match="tokenizers library"), rust_panics("reading text"):
        hf.encode("a" * 50 + "!")


# -- Hugging Face folders ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bart_folder(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from tests import hf_families

    root = tmp_path_factory.mktemp("bart")
    tok = hf_families.bart_tokenizer(root / "tok")
    model = hf_families.build("bart", vocab_size=len(tok))
    model.save_pretrained(root / "model", safe_serialization=True)
    tok.save_pretrained(root / "model")
    return root / "model"


def _edit_tokenizer_json(src: Path, dest: Path, **changes) -> Path:
    shutil.copytree(src, dest)
    doc = json.loads((dest / "tokenizer.json").read_text())
    doc.update(changes)
    (dest / "tokenizer.json").write_text(json.dumps(doc))
    return dest


@pytest.mark.parametrize("name", ["panicking regex", "slow regex", "replace regex"])
def test_a_folders_tokenizer_with_its_own_regex_is_not_used(bart_folder, tmp_path, name):
    folder = _edit_tokenizer_json(bart_folder, tmp_path / "f", **HOSTILE[name])
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.kind == "ids"
    assert "regular expression" in ckpt.meta["tokenizer_missing"]
    with pytest.raises(InputError, match="regular expression") as info:
        ckpt.predict("a" * 50 + "!")
    assert "\n" not in str(info.value)


def test_a_folders_padding_and_truncation_are_turned_off(bart_folder, tmp_path):
    changes = {**HOSTILE["padding"], **HOSTILE["truncation"]}
    folder = _edit_tokenizer_json(bart_folder, tmp_path / "f", **changes)
    ckpt = attnviz.load_checkpoint(folder)
    plain = attnviz.load_checkpoint(bart_folder)
    assert ckpt.src_tokenizer.kind == "hf"
    text = "the cat sat on the mat"
    assert ckpt.src_tokenizer.encode(text).ids == plain.src_tokenizer.encode(text).ids
    assert 3 < len(ckpt.src_tokenizer.encode(text).ids) < 40


def _regex(kind: str, pattern: str) -> dict:
    return {"type": kind, "pattern": {"Regex": pattern}, "content": " ", "behavior": "Isolated"}


@pytest.mark.parametrize(
    "part, component, ok",
    [
        ("normalizer", {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": "AA=="},
            _regex("Replace", " {2,}")]}, True),  # T5, Pegasus as transformers converts them
        ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [
            _regex("Split", r"<extra\_1>|<ctc>|\#"),  # sentencepiece's user-defined pieces
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"}]}, True),
        ("pre_tokenizer", _regex("Split", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?"
                                 r"\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                                 r"\s+(?!\S)|\s+"), True),  # Llama 3
        ("pre_tokenizer", _regex("Split", "(a+)+$"), False),
        ("pre_tokenizer", _regex("Split", r"\w*\d"), False),
        ("pre_tokenizer", _regex("Split", r"a|\d"), False),
        ("pre_tokenizer", {"type": "Sequence", "pretokenizers": [{"type": "Sequence",
            "pretokenizers": [_regex("Split", "(x*)*y")]}]}, False),  # nested
        ("normalizer", {"type": "Python"}, False),
        ("decoder", {"type": "Sequence"}, False),
        ("model", {"type": "Custom"}, False),
    ],
)  # fmt: skip
def test_a_folders_tokenizer_json_components_are_allow_listed(part, component, ok):
    from attnviz.data.tokenizer_checks import check_folder

    doc = {"model": {"type": "BPE"}, part: component}
    if ok:
        check_folder(doc)
    else:
        with pytest.raises(InputError, match=f"tokenizer.json's {part}") as info:
            check_folder(doc)
        assert "\n" not in str(info.value)


def test_a_folder_with_known_components_keeps_its_tokenizer(bart_folder):
    ckpt = attnviz.load_checkpoint(bart_folder)
    assert ckpt.src_tokenizer.kind == "hf" and ckpt.meta["tokenizer_missing"] is None


# -- the app: a slow request does not hold up other sessions ------------------------------------
def test_other_sessions_step_while_one_request_is_held(monkeypatch):
    """One session's start is held inside the tokenizer; another session starts, steps and
    runs to the end meanwhile, and the held one finishes once released."""
    pytest.importorskip("gradio")
    gradio_client = pytest.importorskip("gradio_client")
    import threading

    from helpers import MODELS, launched_app

    from attnviz.app import store

    ckpt = store.get_checkpoint(str(MODELS / "reverse"), "cpu")
    entered, release = threading.Event(), threading.Event()
    tok = ckpt.src_tokenizer
    encode = type(tok).encode

    def slow_encode(self, text):
        if text == "holdme":
            entered.set()
            release.wait(60)
        return encode(self, text)

    monkeypatch.setattr(type(tok), "encode", slow_encode)
    with launched_app() as (_, port):
        url = f"http://127.0.0.1:{port}/"
        held_client = gradio_client.Client(url, verbose=False)
        other = gradio_client.Client(url, verbose=False)
        held = held_client.submit("holdme", api_name="/start")
        try:
            assert entered.wait(30), "the held request never reached the tokenizer"
            start = time.perf_counter()
            out = other.predict("abc", api_name="/step")
            assert out[0] == "c"
            out = other.predict("abc", api_name="/run")
            assert out[0] == "cba"
            assert time.perf_counter() - start < 20
            assert not held.done()
        finally:
            release.set()
        assert held.result(timeout=60)[3]["info"]["step"] == 0
