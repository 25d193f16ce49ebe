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
from attnviz import beam
from attnviz.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
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
        with pytest.raises(InputError, match=r"num_beams [\d,]+ over up to \d+ steps") as info:
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
