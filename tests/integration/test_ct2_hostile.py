"""CTranslate2 folders whose ``model.bin``, ``config.json`` or vocabularies lie: each is one
``AttnvizError`` line, within a second or two, under an address-space limit (a child process
measures time and peak memory).

Before: a rank-255 empty tensor was a "Stride calculation overflowed" traceback; an empty
embedding claiming 2^20 / 2^31 columns or an empty position table claiming 2^29 / 2^32-1 rows
allocated gigabytes; 20,000 empty ``encoder/layer_N`` names were still being counted after a
minute; a 250 MB vocabulary of newlines took 2.5 GB and 26 s to be refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("ctranslate2")
from attnviz.interop.ctranslate2 import read_model_bin  # noqa: E402
from tests.ct2_specs import spec_folder, write_model_bin  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
LIMIT_GB = 3  # address space of the child process: a 4 GB table cannot even be asked for
SECONDS = 2.0
F32 = torch.float32

_CHILD = f"""
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, ({LIMIT_GB} << 30, {LIMIT_GB} << 30))
import attnviz
out = {{}}
for folder in sys.argv[1:]:
    start = time.perf_counter()
    try:
        attnviz.load_checkpoint(folder)
        out[folder] = {{"error": None}}
    except BaseException as exc:
        out[folder] = {{"error": type(exc).__name__, "message": str(exc),
                       "attnviz": isinstance(exc, attnviz.AttnvizError)}}
    out[folder]["seconds"] = time.perf_counter() - start
    # VmHWM: this process's own peak (ru_maxrss keeps the parent's from before exec)
    with open("/proc/self/status") as f:
        hwm = next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
    out[folder]["peak_mb"] = hwm / 1024
print(json.dumps(out))
"""


def _load_limited(folders: list[Path]) -> dict[str, dict]:
    """Load each folder in one child process limited to ``LIMIT_GB`` of address space."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, *map(str, folders)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _variables(folder: Path) -> dict[str, torch.Tensor]:
    """The folder's stored variables (aliases written out as variables of their own)."""
    return dict(read_model_bin(folder / "model.bin").variables)


def _lying(root: Path, name: str, change, positions: int | None = None) -> Path:
    """A copy of a good folder whose variables ``change(variables)`` rewrote."""
    folder = spec_folder(root / name, positions)
    variables = _variables(folder)
    change(variables)
    write_model_bin(folder / "model.bin", variables)
    return folder


def _set(**values):
    def change(variables):
        variables.update({k.replace("__", "/"): v for k, v in values.items()})

    return change


def _layers(variables):
    for i in range(2, 20_002):
        variables[f"encoder/layer_{i}/self_attention/linear_0/weight"] = ((0, 24), F32)


def _wide_embedding(variables):
    """A real 1 x 2^20 embedding (4 MB: the file holds the bytes), and no position table: the
    computed table would be 1024 x 2^20."""
    variables["decoder/embeddings/weight"] = torch.zeros(1, 1 << 20)


CASES = {
    "rank-255": (_set(**{"encoder__x": ((0,) + (2,) * 254, F32)}), "has rank 255"),
    "rank-8-empty-2^32-dims": (
        _set(**{"encoder__x": ((0,) + (2**32 - 1,) * 7, F32)}),
        "more than the",
    ),
    "embedding-2^20-columns": (
        _set(**{"decoder__embeddings__weight": ((0, 1 << 20), F32)}),
        "more than the",
    ),
    "embedding-2^31-columns": (
        _set(**{"decoder__embeddings__weight": ((0, 1 << 31), F32)}),
        "more than the",
    ),
    "embedding-2^20-columns-stored": (_wide_embedding, "more than this process can use"),
    "positions-2^29-rows": (
        _set(
            **{
                "encoder__position_encodings__encodings": ((1 << 29, 0), F32),
                "decoder__position_encodings__encodings": ((1 << 29, 0), F32),
            }
        ),
        "more than the",
    ),  # fmt: skip
    "positions-2^32-rows": (
        _set(
            **{
                "encoder__position_encodings__encodings": ((2**32 - 1, 0), F32),
                "decoder__position_encodings__encodings": ((2**32 - 1, 0), F32),
            }
        ),
        "more than the",
    ),  # fmt: skip
    "20000-layers": (_layers, "fewer than the 8 a layer needs"),
}


@pytest.mark.integration
def test_lying_model_bins_are_one_line_fast_and_small(tmp_path):
    folders = {case: _lying(tmp_path, case, change) for case, (change, _) in CASES.items()}
    results = _load_limited(list(folders.values()))
    for case, folder in folders.items():
        result, match = results[str(folder)], CASES[case][1]
        assert result["attnviz"], (case, result)
        message = result["message"]
        assert match in message and "\n" not in message and len(message) < 600, (case, message)
        assert result["seconds"] < SECONDS, (case, result)
    assert max(r["peak_mb"] for r in results.values()) < 1024, results


@pytest.mark.integration
def test_a_huge_vocabulary_file_is_refused_by_its_size(tmp_path):
    folders = []
    for name, size in (("newlines-250MB", 250 << 20), ("newlines-100KB", 100 << 10)):
        folder = spec_folder(tmp_path / name)
        with open(folder / "source_vocabulary.txt", "wb") as f:
            f.write(b"\n" * min(size, 4 << 20))
            f.truncate(size)  # the rest is sparse: the size alone must refuse it
        (folder / "source_vocabulary.json").unlink()
        folders.append(folder)
    lines = spec_folder(tmp_path / "lines")  # small enough, but more lines than rows
    (lines / "source_vocabulary.json").unlink()
    (lines / "source_vocabulary.txt").write_bytes(b"\n" * 2000)
    results = _load_limited([*folders, lines])
    for folder in folders:
        result = results[str(folder)]
        assert result["error"] == "CheckpointError", result
        assert "more than a vocabulary of 24 tokens takes" in result["message"], result
        assert result["seconds"] < SECONDS, result
    assert "2,000 lines for a vocabulary of 24 tokens" in results[str(lines)]["message"]
    assert max(r["peak_mb"] for r in results.values()) < 1024, results


def test_the_writer_round_trips_a_good_folder(tmp_path):
    """The hostile files above are written by the same writer that rewrites a good folder
    into one that still loads."""
    import attnviz

    folder = spec_folder(tmp_path / "good")
    before = attnviz.load_checkpoint(folder).predict("s1 s2 s3", max_len=8)
    write_model_bin(folder / "model.bin", _variables(folder))
    assert attnviz.load_checkpoint(folder).predict("s1 s2 s3", max_len=8) == before
