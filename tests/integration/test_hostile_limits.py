"""Hostile sizes and files met after loading: beams without bound, corpora that never end,
words of megabytes, a vocabulary of 10^9, export targets that are links, and temporary folders
a killed process left behind. Each is refused in one line, or cleaned up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnviz
from attnviz.core.errors import InputError
from attnviz.decode import beam

ROOT = Path(__file__).resolve().parents[2]
REVERSE = ROOT / "models" / "reverse"
LIMIT_GB = 3


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1"}


def _cli_limited(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``attnviz ARGV`` in a child process limited to ``LIMIT_GB`` of address space."""
    code = (
        f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_GB} << 30,) * 2)\n"
        "from attnviz.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=_env(),
        timeout=timeout,
    )  # fmt: skip


def _one_error_line(proc: subprocess.CompletedProcess, match: str) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnviz: error:"), proc.stderr[-2000:]
    assert match in lines[0], lines[0]
    return lines[0]


# -- beams -----------------------------------------------------------------------------------------
def test_a_huge_num_beams_is_refused_with_the_limit(monkeypatch):
    ckpt = attnviz.load_checkpoint(REVERSE)
    monkeypatch.setattr(beam, "available_memory", lambda: 1 << 30)
    for call in (
        lambda: ckpt.predict("abc", num_beams=1_000_000),
        lambda: ckpt.predict_batch(["abc", "de"], num_beams=1_000_000),
        lambda: ckpt.beam("abc", 100_000, max_len=40),
    ):
        with pytest.raises(InputError, match=r"num_beams [\d,]+ over \d+ steps") as info:
            call()
        message = str(info.value)
        assert "\n" not in message and "at most" in message and "beams fit" in message
    assert ckpt.predict("abc", num_beams=4) == "cba"  # a sane beam still runs


def test_the_beam_bound_counts_beams_times_length():
    cfg = attnviz.load_checkpoint(REVERSE).config
    one = beam.beam_memory(cfg, 10, 100, 10)
    assert beam.beam_memory(cfg, 20, 100, 10) > 1.9 * one
    assert beam.beam_memory(cfg, 10, 200, 10) > 1.9 * one - beam.beam_memory(cfg, 10, 0, 10)
    assert beam.beam_memory(cfg, 10, 100, 10, attention=True) > one


def test_a_beam_growing_past_the_memory_is_refused_as_it_reaches_it(monkeypatch):
    """No end id and a length limit of 10^9: the search runs while beams x steps fit, and is
    refused (not grown) once the next doubling of its horizon would not."""
    import torch

    cfg = attnviz.ModelConfig(23, 19, d_model=24, n_heads=4, d_ff=40, dropout=0.0,
                              positions="relative", max_len=10**12)  # fmt: skip
    torch.manual_seed(0)
    model = attnviz.Transformer(cfg).eval()
    src = torch.randint(3, 23, (1, 5), generator=torch.Generator().manual_seed(3))
    k = 600
    fits, grows = beam.beam_memory(cfg, k, 128, 5), beam.beam_memory(cfg, k, 256, 5)
    assert 64 << 20 < fits < grows
    monkeypatch.setattr(beam, "available_memory", lambda: int((fits + grows) / 2 / 0.75))
    reached = []
    step = beam.Constraints.apply

    def count(self, logp, seqs, i, n_max):
        reached.append(i)
        return step(self, logp, seqs, i, n_max)

    monkeypatch.setattr(beam.Constraints, "apply", count)
    with pytest.raises(InputError, match="num_beams 600 over 256 steps"):
        beam.beam_search(model, src, 1, None, beam_size=k, max_len=10**9)
    assert max(reached) == 127  # the first 128 steps ran, then the refusal


def test_the_cli_refuses_a_huge_beam_and_a_zero_length(tmp_path):
    line = _one_error_line(
        _cli_limited("beam", str(REVERSE), "--text", "abc", "--num-beams", "100000"),
        "num_beams 100,000",
    )
    assert "at most" in line
    _one_error_line(
        _cli_limited("beam", str(REVERSE), "--text", "abc", "--max-len", "0"),
        "max_len must be at least 1, got 0",
    )
    with pytest.raises(InputError, match="max_len must be at least 1"):
        attnviz.load_checkpoint(REVERSE).predict("abc", max_len=0)


def test_a_generation_config_asking_for_a_million_beams_is_refused(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from tests import hf_families

    folder = tmp_path / "marian"
    hf_families.build("marian").save_pretrained(folder, safe_serialization=True)
    gen = json.loads((folder / "generation_config.json").read_text())
    gen["num_beams"] = 1_000_000
    (folder / "generation_config.json").write_text(json.dumps(gen))
    ckpt = attnviz.load_checkpoint(folder)
    monkeypatch.setattr(beam, "available_memory", lambda: 2 << 30)
    for call in (ckpt.predict, lambda t: ckpt.predict_batch([t])):
        with pytest.raises(InputError, match="num_beams 1,000,000") as info:
            call("5 7 9")
        assert "\n" not in str(info.value)


# -- corpora -------------------------------------------------------------------------------------
def _read_in_child(*paths: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """``read_pairs(*paths)`` in a child limited to ``LIMIT_GB`` (a FIFO or a device would
    block or fill memory before the fix): prints the error's type and message."""
    code = (
        f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_GB} << 30,) * 2)\n"
        "from attnviz.data import read_pairs\n"
        "try:\n    read_pairs(*sys.argv[1:])\n    print('read')\n"
        "except BaseException as exc:\n    print(type(exc).__name__, str(exc).replace(chr(10), ' '))\n"
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-c", code, *paths], capture_output=True, text=True, env=_env(),
        timeout=timeout,
    )  # fmt: skip


def test_only_regular_files_are_read_as_corpora(tmp_path):
    fifo = tmp_path / "pipe.tsv"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.tsv"
    zero.symlink_to("/dev/zero")
    folder = tmp_path / "folder.tsv"
    folder.mkdir()
    for paths in ([str(fifo)], [str(zero)], ["/dev/zero", "/dev/zero"], [str(folder)]):
        out = _read_in_child(*paths).stdout.strip()
        assert out.startswith("CorpusError") and "cannot read" in out, (paths, out)
        assert "regular file" in out or "folder" in out, out


def test_a_line_longer_than_the_cap_is_refused_with_file_and_line(tmp_path):
    from attnviz.data import read_pairs
    from attnviz.data.corpus import MAX_LINE_BYTES, CorpusError

    path = tmp_path / "long.tsv"
    with path.open("w") as f:
        f.write("a b\tb a\n")
        f.write("x" * (3 * MAX_LINE_BYTES) + "\ty\n")
    with pytest.raises(
        CorpusError, match=rf"long.tsv:2: the line is longer than {MAX_LINE_BYTES:,}"
    ):
        read_pairs(path)
    ok = tmp_path / "ok.tsv"
    ok.write_text("a" * (MAX_LINE_BYTES - 2) + "\tb\n")  # exactly the cap: read
    assert len(read_pairs(ok)[0][0]) == MAX_LINE_BYTES - 2
    out = _read_in_child(str(path)).stdout.strip()  # a 200 MB line is refused the same way
    assert out.startswith("CorpusError") and "long.tsv:2" in out


def test_a_jsonl_number_of_5000_digits_is_one_line(tmp_path):
    from attnviz.data import read_pairs
    from attnviz.data.corpus import CorpusError

    path = tmp_path / "big.jsonl"
    line = '{"translation": {"en": "a", "de": "b"}, "n": ' + "9" * 5000 + "}"
    path.write_text('{"translation": {"en": "a", "de": "b"}}\n' + line + "\n")
    with pytest.raises(CorpusError, match=r"big.jsonl:2: not readable JSON") as info:
        read_pairs(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_a_word_of_megabytes_does_not_hold_up_subword_training(kind):
    """Before the cap, a 2 MB word kept the BPE trainer busy for over 2 minutes."""
    import time

    from attnviz.data.subword import MAX_WORD_CHARS
    from attnviz.data.tokenizer import train_tokenizer

    texts = ["the cat sat on the mat", "x" * 2_000_000 + " dog", "a dog and a cat"] * 3
    start = time.perf_counter()
    tok = train_tokenizer(kind, texts, vocab_size=60)
    assert time.perf_counter() - start < 10
    assert max(len(t) for t in tok.tokens) <= MAX_WORD_CHARS + 1
    assert tok.decode(tok.encode("the cat").ids) == "the cat"


def test_a_vocabulary_of_a_billion_is_refused(tmp_path):
    from attnviz.data.tokenizer import MAX_VOCAB_SIZE, train_tokenizer

    for kind in ("bpe", "unigram", "word"):
        with pytest.raises(InputError, match=f"at most {MAX_VOCAB_SIZE:,}"):
            train_tokenizer(kind, ["a b c"], vocab_size=10**9)
    corpus = tmp_path / "c.tsv"
    corpus.write_text("a b\tb a\n" * 20)
    _one_error_line(
        _cli_limited("train", "--data", str(corpus), "--tokenizer", "bpe", "--vocab-size",
                     str(10**9), "--out", str(tmp_path / "out"), "--steps", "1"),
        f"at most {MAX_VOCAB_SIZE:,}",
    )  # fmt: skip


# -- export-hf targets, modes and what a killed process left ------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from tests import hf_families

    folder = tmp_path_factory.mktemp("marian")
    hf_families.build("marian").save_pretrained(folder, safe_serialization=True)
    return folder


def test_export_hf_to_a_link_is_refused_clearly(marian, tmp_path, capsys):
    from attnviz import cli
    from attnviz.interop.hf.export import export_hf

    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(InputError, match="is a symbolic link") as info:
        export_hf(marian, link)
    assert "\n" not in str(info.value) and "Errno" not in str(info.value)
    assert link.is_symlink() and list(target.iterdir()) == []
    assert cli.main(["export-hf", str(marian), str(link)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "symbolic link" in err and "Errno" not in err


def test_an_exported_folder_is_readable_as_save_pretrained_leaves_it(marian, tmp_path):
    from attnviz.interop.hf.export import export_hf

    out = export_hf(marian, tmp_path / "out")
    assert out.stat().st_mode & 0o777 == 0o755
    files = list(out.iterdir())
    assert files and all(f.stat().st_mode & 0o777 == 0o644 for f in files)


def test_a_killed_exports_staging_folder_is_removed_by_the_next_export(marian, tmp_path):
    from attnviz.interop.hf.export import export_hf

    root = tmp_path / "exports"
    root.mkdir()
    dead = root / f".old.attnviz-export-{_dead_pid()}-abc"
    old = root / f".older.attnviz-export-{os.getppid()}-def"  # a live pid, two hours old
    busy = root / f".busy.attnviz-export-{os.getppid()}-ghi"  # a live pid, just made
    mine = root / "attnviz-export-notes"  # no pid: not a staging folder
    for folder in (dead, old, busy, mine):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    os.utime(old, (os.path.getmtime(old) - 7200,) * 2)
    export_hf(marian, root / "out")
    assert not dead.exists() and not old.exists()
    assert busy.exists() and mine.exists() and (root / "out").is_dir()
    assert sorted(p.name for p in root.iterdir()) == sorted([busy.name, mine.name, "out"])


def test_app_folders_of_a_killed_app_are_removed_on_the_next_start(tmp_path, monkeypatch):
    import tempfile

    from attnviz.app import server, store

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"attnviz-uploads-{_dead_pid()}-abc"
    live = tmp_path / f"attnviz-exports-{os.getppid()}-def"  # another app still running
    other = tmp_path / "attnviz-uploads-xyz"  # not named by attnviz with a pid
    for folder in (dead, live, other):
        (folder / "sub").mkdir(parents=True)
    assert server.main(["--model", str(tmp_path / "nope"), "--no-browser"]) == 2
    assert not dead.exists() and live.exists() and other.exists()
    made = store.make_temp_dir("uploads")
    assert made.name.startswith(f"attnviz-uploads-{os.getpid()}-") and made.parent == tmp_path
    assert store.clean_stale_dirs() == [] and made.exists()  # never this process's own
