"""The app's Alignment tab as plain Python (no browser): the grid is the library's report, the
links drawn are that report's, Pharaoh downloads parse back, and missing gold is explained."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import attnviz
from attnviz import analysis
from attnviz.analysis.align import parse_pharaoh, to_pharaoh
from attnviz.app import session
from attnviz.app.panels import alignment
from attnviz.data.tasks import get_task


@pytest.fixture(scope="module")
def reverse(models_dir):
    return str(models_dir / "reverse")


@pytest.fixture(scope="module")
def decoded(reverse):
    return session.run(session.new_state(reverse), "helloworld").state


@pytest.fixture(scope="module")
def no_task(models_dir, tmp_path_factory):
    """models/reverse saved again without a task: no gold links anywhere."""
    folder = tmp_path_factory.mktemp("ckpt") / "untasked"
    shutil.copytree(models_dir / "reverse", folder)
    ckpt = attnviz.load_checkpoint(folder)
    meta = {**ckpt.meta, "task": None}
    attnviz.save_checkpoint(folder, ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer, meta)
    return session.run(session.new_state(str(folder)), "helloworld").state


@pytest.mark.parametrize(("lens", "setting"), [("weights", "output"), ("norms", "input")])
def test_grid_is_the_library_report_on_the_task_sentences(decoded, reverse, lens, setting):
    ckpt = attnviz.load_checkpoint(reverse)
    task = get_task("reverse")
    ex = task.examples("test", alignment.GRID_SENTENCES, seed=1)
    want = analysis.alignment(
        ckpt, [e.src for e in ex], [task.links(e.src) for e in ex], [e.tgt for e in ex],
        lens=lens, setting=setting,
    )  # fmt: skip
    rep, corpus = alignment.report(decoded, lens, setting)
    assert len(corpus.sources) == len(ex) == 40
    np.testing.assert_allclose(rep.aer, want.aer)
    np.testing.assert_allclose(rep.layer_aer, want.layer_aer)
    assert rep.best == want.best and rep.mean_aer == pytest.approx(want.mean_aer)
    view = alignment.view(decoded, lens, setting)
    (bl, bh), best = want.best
    assert f"cross L{bl} H{bh} — AER {best:.3f}" in view.message
    assert view.best == (bl, bh)
    for ly in range(want.aer.shape[0]):  # every head is a button that opens it
        for h in range(want.aer.shape[1]):
            assert f'data-av-open="cross {ly} {h}"' in view.grid_html
            assert f"{want.aer[ly, h]:.3f}" in view.grid_html
    assert view.grid_html.count("av-sinkfill") == want.aer.size  # a sink meter per head
    # a layer's number is the AER of its head-averaged attention, not the mean of its heads'
    # AERs: said so wherever it is shown
    layers = ", ".join(f"L{i} {v:.3f}" for i, v in enumerate(want.layer_aer))
    assert f"AER of each layer's head-averaged attention: {layers}" in view.message
    assert "Layer means" not in view.message
    assert "<th>heads averaged</th>" in view.grid_html and "layer mean" not in view.grid_html


def test_current_links_are_the_library_links(decoded, reverse):
    ckpt = attnviz.load_checkpoint(reverse)
    task = get_task("reverse")
    for lens, setting in (("weights", "output"), ("rollout", "input")):
        want = analysis.alignment(
            ckpt, ["helloworld"], [task.links("helloworld")], ["dlrowolleh"],
            lens=lens, setting=setting,
        )  # fmt: skip
        cur = alignment.current(decoded, 1, 2, lens, setting)
        assert cur.predicted == want.links[0][1, 2]
        assert cur.forced and cur.target == "dlrowolleh"
        assert cur.gold.sure == frozenset(task.links("helloworld"))
        assert cur.matrix.shape == (10, 10)
    sinks = cur.sinks
    assert len(sinks) == 3 * 2 * 4 and all(0 <= v <= 1 for v in sinks.values())


def test_pharaoh_download_parses_back(decoded):
    view = alignment.download(decoded, "L1", "H2", "weights", "output")
    assert view.path and "40 lines" in view.message
    lines = Path(view.path).read_text(encoding="utf-8").splitlines()
    rep, _ = alignment.report(decoded)
    assert lines == rep.pharaoh(1, 2)
    for line, links in zip(lines, rep.links, strict=True):
        assert parse_pharaoh(line).sure == frozenset(links[1, 2])


def test_uploaded_sources_and_gold_make_the_grid(decoded, reverse, tmp_path):
    ckpt = attnviz.load_checkpoint(reverse)
    sources = ["abc", "hello", "xyzzy"]
    gold = [to_pharaoh(get_task("reverse").links(s)) for s in sources]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n")
    (tmp_path / "gold.txt").write_text("\n".join(gold) + "\n")
    rep, corpus = alignment.report(
        decoded, "weights", "output", str(tmp_path / "src.txt"), str(tmp_path / "gold.txt")
    )
    want = analysis.alignment(ckpt, sources, gold)  # greedy output, as the tab says
    np.testing.assert_allclose(rep.aer, want.aer)
    assert "3 uploaded sentences" in corpus.about


def test_bad_gold_is_one_line_and_loses_nothing(decoded, tmp_path):
    (tmp_path / "src.txt").write_text("abc\nhello\n")
    (tmp_path / "gold.txt").write_text("2-0 1-1 0-2\n")
    (tmp_path / "bad.txt").write_text("0-0 1x1\n")
    short = alignment.view(decoded, sources_file=str(tmp_path / "src.txt"),
                           gold_file=str(tmp_path / "gold.txt"))  # fmt: skip
    assert "2 lines but the gold file 1" in short.message and "⚠" in short.message
    assert short.figures[1] is not None and "cross L" in short.message  # the overlay stays
    bad = alignment.view(decoded, sources_file=str(tmp_path / "src.txt"),
                         gold_file=str(tmp_path / "bad.txt"))  # fmt: skip
    assert "gold file, line 1" in bad.message and "'1x1'" in bad.message.replace("&#x27;", "'")
    half = alignment.view(decoded, sources_file=str(tmp_path / "src.txt"))
    assert "upload the gold (Pharaoh) file too" in half.message
    (tmp_path / "one.txt").write_text("0-9 1-8\n")  # one line, no sources: this input's gold
    one = alignment.view(decoded, gold_file=str(tmp_path / "one.txt"))
    assert "2 gold" in one.message and "AER on 40" in one.message
    line = alignment.view(decoded, gold_line="0-0 nonsense")
    assert "the gold line" in line.message and "AER on 40" in line.message  # the grid stays


def test_without_a_task_or_gold_the_tab_says_what_is_needed(no_task, tmp_path):
    view = alignment.view(no_task)
    assert alignment.NEEDS_GOLD in view.message and view.grid_html == ""
    assert "greedy output" in view.message and "no gold links" in view.message
    with_line = alignment.view(no_task, gold_line="9-0 8-1 7-2")
    assert "3 gold" in with_line.message
    dl = alignment.download(no_task, None, None)
    assert dl.path is None and "no built-in task" in dl.message


def test_faithfulness_curves_at_the_shown_step(decoded, reverse):
    back = session.goto(decoded, 3).state
    view = alignment.faithfulness_view(back, k_max=3)
    want = analysis.faithfulness(attnviz.load_checkpoint(reverse), ["helloworld"], step=2, k_max=3)
    fig = view.figures[0]
    curves = {(t.name, t.xaxis): list(t.y) for t in fig.data}
    assert curves[("random ranking", "x")] == pytest.approx(list(want.comprehensiveness["random"]))
    assert curves[("attention weights", "x2")] == pytest.approx(list(want.sufficiency["weights"]))
    assert "Step 3" in view.message
    start = session.reset(decoded).state
    assert "take at least one Step" in alignment.faithfulness_view(start).message
