"""Hostile or broken Hugging Face folders: one clear AttnvizError, or ids in and ids out.

Numbers given as strings, a vocabulary size of 1e9, a vocab.json with ids outside the model,
special ids that disagree with the tokenizer: each is refused in one line naming what to fix
(never a TypeError, ValueError, IndexError or a huge allocation); a folder whose tokenizer
is missing or broken still loads, and the app steps it with ids shown as ``#<id>``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import attnviz
from attnviz.core.errors import AttnvizError, InputError, InteropError

pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

from tests import hf_families  # noqa: E402  (after the skips)


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict[str, Path]:
    """family -> folder without a tokenizer (Marian, BART, T5)."""
    out = {}
    for family in ("marian", "bart", "t5"):
        folder = tmp_path_factory.mktemp(family)
        hf_families.build(family).save_pretrained(folder, safe_serialization=True)
        out[family] = folder
    return out


@pytest.fixture(scope="module")
def marian_tok(tmp_path_factory) -> Path:
    """A Marian folder with its tokenizer."""
    root = tmp_path_factory.mktemp("marian_tok")
    tok = hf_families.marian_tokenizer(root / "tok")
    hf_model = hf_families.build(
        "marian",
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        decoder_start_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    hf_model.generation_config.max_new_tokens = 6
    hf_model.save_pretrained(root / "model", safe_serialization=True)
    tok.save_pretrained(root / "model")
    return root / "model"


def _edit(src: Path, dest: Path, name: str, **changes) -> Path:
    shutil.copytree(src, dest)
    data = json.loads((dest / name).read_text())
    data.update(changes)
    (dest / name).write_text(json.dumps(data))
    return dest


def _one_line(exc: pytest.ExceptionInfo) -> str:
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


# -- B5: sizes ---------------------------------------------------------------------------------
def test_huge_vocab_size_is_refused_before_anything_is_sized(marian_tok, tmp_path):
    """vocab_size 1e9 beside a tokenizer: refused in one line under a 4 GB address space."""
    folder = _edit(marian_tok, tmp_path / "huge", "config.json", vocab_size=10**9)
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        import attnviz
        try:
            attnviz.load_checkpoint({str(folder)!r})
        except attnviz.AttnvizError as exc:
            print("REFUSED", exc)
            sys.exit(0)
        sys.exit(1)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "vocab_size=1000000000 but the weights have" in done.stdout


# -- B9: strings where numbers belong ------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "name", "changes", "match"),
    [
        ("t5", "config.json", {"n_positions": "abc"}, "n_positions must be an integer"),
        ("t5", "config.json", {"layer_norm_epsilon": "abc"}, "layer_norm_epsilon must be a"),
        ("bart", "config.json", {"activation_function": ["relu"]}, "activation"),
        ("marian", "generation_config.json", {"max_length": "20"}, "max_length must be a"),
        ("marian", "generation_config.json", {"suppress_tokens": "abc"}, "suppress_tokens"),
        ("marian", "generation_config.json", {"suppress_tokens": [10**6]}, "suppress_tokens"),
        ("marian", "generation_config.json", {"bad_words_ids": [5]}, "bad_words_ids"),
    ],
)
def test_wrong_types_are_one_clear_error(plain, tmp_path, family, name, changes, match):
    folder = _edit(plain[family], tmp_path / "f", name, **changes)
    with pytest.raises(InteropError, match=match) as exc:
        attnviz.load_checkpoint(folder)
    _one_line(exc)


@pytest.mark.parametrize("bad_id", [10**6, -5])
def test_vocab_json_with_ids_outside_the_model(marian_tok, tmp_path, bad_id):
    """The tokenizer is not used (ids in, ids out) and text gets one clear error."""
    folder = tmp_path / "m"
    shutil.copytree(marian_tok, folder)
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab["▁cat"] = bad_id
    (folder / "vocab.json").write_text(json.dumps(vocab))
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.src_tokenizer.kind == "ids"
    assert str(bad_id) in ckpt.meta["tokenizer_missing"]
    with pytest.raises(InputError, match="type token ids") as exc:
        ckpt.predict("the cat sat")
    _one_line(exc)


# -- B10: no working tokenizer: the app steps with ids -------------------------------------------
@pytest.mark.parametrize("broken", [False, True])
def test_app_steps_a_folder_without_a_working_tokenizer(plain, marian_tok, tmp_path, broken):
    from attnviz.app import session

    if broken:  # a vocab.json that is not JSON
        folder = tmp_path / "broken"
        shutil.copytree(marian_tok, folder)
        (folder / "vocab.json").write_text("{not json")
    else:
        folder = plain["marian"]
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.meta["tokenizer_missing"]
    eos = ckpt.config.eos_id
    state = session.new_state(str(folder))
    view = session.step(state, f"5 7 9 {eos}")
    assert "⚠" not in view.message, view.message
    assert view.state.src_pieces == ["#5", "#7", "#9", f"#{eos}"]
    first = view.state.tokens[0]
    assert view.output.startswith(str(first)) or first == eos
    view = session.run(view.state)
    assert view.state.tokens == ckpt.stepper(f"5 7 9 {eos}").run()
    refused = session.step(session.new_state(str(folder)), "hello")
    assert "type token ids" in refused.message  # a message, not a crash


# -- B12: special ids against the tokenizer ------------------------------------------------------
def test_eos_that_is_the_tokenizers_unknown_is_refused(marian_tok, tmp_path):
    folder = _edit(marian_tok, tmp_path / "m", "config.json", eos_token_id=1)
    gen = json.loads((folder / "generation_config.json").read_text())
    gen["eos_token_id"] = 1
    (folder / "generation_config.json").write_text(json.dumps(gen))
    with pytest.raises(InteropError, match=r"eos_token_id 1 \(the tokenizer's unknown") as exc:
        attnviz.load_checkpoint(folder)
    _one_line(exc)
    assert isinstance(exc.value, AttnvizError)


# -- issue 25: projections whose widths disagree --------------------------------------------------
def _misshapen(src: Path, dest: Path, part: str = "q_proj.weight", shape=(3, 7)) -> Path:
    """A copy of ``src`` whose first ``part`` tensor has ``shape``."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dest)
    tensors = load_file(dest / "model.safetensors")
    key = next(k for k in sorted(tensors) if k.endswith(part))
    tensors[key] = torch.randn(*shape)
    save_file(tensors, dest / "model.safetensors", metadata={"format": "pt"})
    return dest


@pytest.mark.parametrize("family", ["marian", "bart", "t5"])
def test_qkv_widths_that_disagree_are_one_line_everywhere(plain, tmp_path, capsys, family):
    from attnviz import cli

    part = "q.weight" if family == "t5" else "q_proj.weight"
    folder = _misshapen(plain[family], tmp_path / "f", part)
    with pytest.raises(InteropError, match=r"query/key/value weights .*\[3, 7\]") as exc:
        attnviz.load_checkpoint(folder)
    _one_line(exc)
    corpus = tmp_path / "c.tsv"
    corpus.write_text("5 7\t7 5\n" * 4)
    for argv in (
        ["step", "--model", str(folder), "--text", "5 7 9"],
        ["train", "--init", str(folder), "--data", str(corpus), "--out", str(tmp_path / "o"),
         "--steps", "1"],
    ):  # fmt: skip
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "query/key/value" in err and "Traceback" not in err


def test_qkv_biases_that_disagree_are_one_line(plain, tmp_path):
    folder = _misshapen(plain["marian"], tmp_path / "f", "k_proj.bias", (5,))
    with pytest.raises(InteropError, match=r"query/key/value biases") as exc:
        attnviz.load_checkpoint(folder)
    _one_line(exc)
