"""`attnviz data`: a built-in task written as train/dev/test TSV files that read back."""

from __future__ import annotations

import pytest

from attnviz.cli import main
from attnviz.data import read_pairs
from attnviz.data.tasks import get_task


def test_data_writes_disjoint_splits_that_read_back(tmp_path, capsys):
    out = tmp_path / "corpus"
    argv = ["data", "--task", "translate", "--out", str(out),
            "--train", "60", "--dev", "8", "--test", "9"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'train.tsv'} (60 pairs)" in printed
    assert f"attnviz train --data {out / 'train.tsv'} --dev {out / 'dev.tsv'}" in printed
    splits = {name: read_pairs(out / f"{name}.tsv") for name in ("train", "dev", "test")}
    assert [len(p) for p in splits.values()] == [60, 8, 9]
    task = get_task("translate")
    for name, pairs in splits.items():
        assert all(task.target(s) == t for s, t in pairs)
        want = {"train": "train", "dev": "validation", "test": "test"}[name]
        assert {task.split_of(s) for s, _ in pairs} == {want}
    first = (out / "train.tsv").read_bytes()
    assert main(argv) == 0 and (out / "train.tsv").read_bytes() == first  # deterministic
    assert not list(out.glob("*.tmp"))


def test_a_character_task_keeps_its_text_exactly(tmp_path):
    assert main(["data", "--task", "reverse", "--out", str(tmp_path),
                 "--train", "20", "--dev", "3", "--test", "3"]) == 0  # fmt: skip
    pairs = read_pairs(tmp_path / "train.tsv")
    assert len(pairs) == 20 and all(t == s[::-1] for s, t in pairs)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--dev", "0"], "each split needs at least 1 pair, got dev=0"),
        (["--train", "-3"], "each split needs at least 1 pair, got train=-3"),
    ],
)
def test_bad_sizes_are_one_line_exit_2_and_nothing_written(tmp_path, capsys, extra, message):
    out = tmp_path / "corpus"
    assert main(["data", "--task", "copy", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"attnviz: error: {message}"
    assert not out.exists()


def test_an_unknown_task_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit, match="^2$") as info:
        main(["data", "--task", "nope", "--out", str(tmp_path / "c")])
    assert info.value.code == 2 and "invalid choice" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
