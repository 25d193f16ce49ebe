"""Alignment scoreboard and lenses: AER from cross-attention, norms, rollout, Pharaoh files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_model, random_batch
from hypothesis import given
from hypothesis import strategies as st

import attnviz
from attnviz.analysis import align as al
from attnviz.analysis.lenses import attention_module, lens, rollout, value_contributions
from attnviz.data.tasks import get_task

KINDS = ("encoder_self", "decoder_self", "cross")


@pytest.fixture(scope="module")
def shipped(models_dir):
    return {n: attnviz.load_checkpoint(models_dir / n) for n in ("reverse", "copy", "sort")}


def _independent_aer(ckpt, sources, targets, gold, setting) -> np.ndarray:
    """AER of every head ``[L, H]``, computed straight from record()'s cross-attention, one
    sentence at a time (character tasks: one piece per word, no specials inside)."""
    cfg = ckpt.config
    shape = (cfg.n_decoder_layers, cfg.n_heads)
    a_s, n_a, n_s = np.zeros(shape), np.zeros(shape), 0
    for src, tgt, links in zip(sources, targets, gold, strict=True):
        s = torch.tensor([ckpt.encode_source(src).ids])
        t = torch.tensor([[cfg.bos_id, *ckpt.tgt_tokenizer.encode(tgt).ids]])
        with torch.no_grad(), attnviz.record(ckpt.model) as trace:
            ckpt.model(s, t)
        n_s += len(links)
        for layer, head in np.ndindex(*shape):
            w = trace.weights("cross", layer)[0, head].numpy()  # [Tt, Ts]
            shift = 1 if setting == "input" else 0
            pred = {(int(np.argmax(w[j + shift])), j) for j in range(len(tgt))}
            a_s[layer, head] += len(pred & set(links))
            n_a[layer, head] += len(pred)
    return 1 - 2 * a_s / (n_a + n_s)


@pytest.mark.parametrize("name", ["reverse", "copy", "sort"])
@pytest.mark.parametrize("setting", ["output", "input"])
def test_alignment_equals_an_aer_computed_from_the_trace(shipped, name, setting):
    ckpt, task = shipped[name], get_task(name)
    exs = task.examples("test", 12, seed=5)
    sources, targets = [e.src for e in exs], [e.tgt for e in exs]
    gold = [task.links(s) for s in sources]
    report = al.alignment(ckpt, sources, gold, targets=targets, setting=setting, batch_size=5)
    assert report.aer.shape == (ckpt.config.n_decoder_layers, ckpt.config.n_heads)
    want = _independent_aer(ckpt, sources, targets, gold, setting)
    np.testing.assert_allclose(report.aer, want, atol=1e-9)
    (layer, head), best = report.best
    assert best == report.aer.min() == report.aer[layer, head]
    lines = report.pharaoh()
    assert [al.parse_pharaoh(x).sure for x in lines] == [
        frozenset(s[layer, head]) for s in report.links
    ]


def test_copy_and_reverse_have_a_head_that_aligns(shipped):
    for name, bound in (("copy", 0.05), ("reverse", 0.25)):
        task = get_task(name)
        sources = [e.src for e in task.examples("test", 30, seed=2)]
        report = al.alignment(shipped[name], sources, [task.links(s) for s in sources])
        assert report.best[1] <= bound, (name, report.text())


def test_translate_links_follow_the_grammar(models_dir):
    task = get_task("translate")
    src = "the big dog sees a small cat quickly with my friend"
    tgt = task.target(src).split()
    links = dict((j, i) for i, j in task.links(src))
    words = src.split()
    assert len(links) == len(tgt) and 0 not in links.values()  # "the" translates to nothing
    assert words[links[len(tgt) - 1]] == "sees"  # the verb comes last
    for j, w in enumerate(tgt):
        assert w in task.lexicon[words[links[j]]]  # each target word is its source's translation
    ckpt = attnviz.load_checkpoint(models_dir / "translate")
    sources = [e.src for e in task.examples("test", 40, seed=4)]
    report = al.alignment(ckpt, sources, [task.links(s) for s in sources])
    assert report.best[1] < 0.1, report.text()


def test_sort_links_keep_equal_letters_in_order():
    assert get_task("sort").links("banana") == [(1, 0), (3, 1), (5, 2), (0, 3), (2, 4), (4, 5)]
    assert get_task("reverse").links("abc") == [(2, 0), (1, 1), (0, 2)]


@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), st.booleans()), max_size=30))
def test_pharaoh_round_trips(items):
    sure = {(i, j) for i, j, s in items if s}
    possible = {(i, j) for i, j, _ in items}
    gold = al.parse_pharaoh(al.to_pharaoh(sure, possible))
    assert gold.sure == sure and gold.possible == possible | sure


def test_pharaoh_files_and_bad_lines(tmp_path):
    path = tmp_path / "links.txt"
    al.write_pharaoh(path, [{(0, 1), (2, 0)}, set()])
    golds = al.read_pharaoh(path)
    assert [g.sure for g in golds] == [frozenset({(0, 1), (2, 0)}), frozenset()]
    for bad in ("0-x", "1:2", "-1-2"):
        with pytest.raises(attnviz.InputError, match="not a Pharaoh link"):
            al.parse_pharaoh(bad)


def test_aer_formula_counts_possible_links():
    gold = [al.parse_pharaoh("0-0 1p1")]
    assert al.aer([{(0, 0), (1, 1)}], gold) == pytest.approx(1 - (1 + 2) / (2 + 1))
    assert al.aer([{(0, 0)}], gold) == 0.0


def test_alignment_refuses_bad_arguments(shipped):
    ckpt = shipped["copy"]
    with pytest.raises(attnviz.InputError, match="setting"):
        al.alignment(ckpt, ["abc"], [[(0, 0)]], setting="middle")
    with pytest.raises(attnviz.InputError, match="gold"):
        al.alignment(ckpt, ["abc", "de"], [[(0, 0)]])
    with pytest.raises(attnviz.InputError, match="lens"):
        al.alignment(ckpt, ["abc"], ["0-0 1-1 2-2"], lens="magic")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("norm_first", [False, True])
def test_value_contributions_rebuild_the_module_output(kind, norm_first):
    """Σ_j α_ij f_h(x_j) over keys and heads, plus the output bias, is the module's output."""
    model = make_model(norm_first=norm_first)
    src, tgt, sp, tp = random_batch(model)
    module = attention_module(model, kind, 1)
    seen = []
    handle = module.register_forward_hook(lambda m, i, out: seen.append(out.detach()))
    try:
        with torch.no_grad(), attnviz.record(model) as trace:
            model(src, tgt, sp, tp)
    finally:
        handle.remove()
    parts = value_contributions(model, trace, kind, 1)  # [B, H, Tq, Tk, D]
    rebuilt = parts.sum((1, 3)) + module.out_proj.bias
    torch.testing.assert_close(rebuilt, seen[-1], atol=1e-5, rtol=1e-5)
    norms = lens(model, trace, kind, 1, "norms")
    np.testing.assert_allclose(norms, parts.norm(dim=-1).numpy(), atol=1e-5)
    blocked = np.broadcast_to(trace.numpy(kind, 1, "mask"), norms.shape)
    assert (norms[blocked] == 0).all()  # a masked cell carries nothing


@pytest.mark.parametrize("kind", KINDS)
def test_rollout_rows_sum_to_one(kind):
    model = make_model(n_encoder_layers=3, n_decoder_layers=2)
    src, tgt, sp, tp = random_batch(model)
    with torch.no_grad(), attnviz.record(model) as trace:
        model(src, tgt, sp, tp)
    for layer in trace.layers(kind):
        r = rollout(trace, kind, layer)
        assert r.shape[1] == 1 and (r >= 0).all()
        np.testing.assert_allclose(r.sum(-1), 1.0, atol=1e-5)
    if kind == "decoder_self":  # causal: rollout never reaches a later position
        r = rollout(trace, kind, 1)[0, 0]
        assert np.allclose(np.triu(r, 1), 0.0)


def test_align_command_reads_pharaoh_files_and_writes_links(models_dir, tmp_path, capsys):
    from attnviz.cli import main

    task = get_task("copy")
    sources = [e.src for e in task.examples("test", 8, seed=3)]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n")
    al.write_pharaoh(tmp_path / "gold.txt", [task.links(s) for s in sources])
    out = tmp_path / "pred.txt"
    args = ["align", str(models_dir / "copy"), "--sources", str(tmp_path / "src.txt"),
            "--gold", str(tmp_path / "gold.txt"), "--pharaoh", str(out)]  # fmt: skip
    assert main(args) == 0
    assert "best: cross L" in capsys.readouterr().out
    predicted = al.read_pharaoh(out)
    assert len(predicted) == len(sources)
    assert al.aer([g.sure for g in predicted], al.read_pharaoh(tmp_path / "gold.txt")) < 0.05
    assert main(["align", str(models_dir / "copy"), "--sources", str(tmp_path / "src.txt")]) == 2
    assert "together" in capsys.readouterr().err
