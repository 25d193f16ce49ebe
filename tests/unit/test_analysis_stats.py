"""Head statistics on hand-made attention with known answers, and on recorded traces."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_model, random_batch

import attnviz
from attnviz.analysis import head_stats, matrix_stats, role_of
from attnviz.analysis.stats import BROAD_ROLE, DEAD_ROLE, UNIFORM_ROLE, with_ablation


def _stats(w, **kw):
    return {k: float(v) for k, v in matrix_stats(np.asarray(w, float), **kw).items()}


def test_identity_is_a_diagonal_copy_head():
    s = _stats(np.eye(6))
    assert s["diagonal"] == 1 and s["entropy"] == 0 and s["norm_entropy"] == 0
    assert s["max_weight"] == 1 and s["distance"] == 0 and s["previous"] == 0
    assert role_of(s) == "diagonal/copy head"


def test_uniform_has_normalised_entropy_one_and_is_called_uniform_not_dead():
    s = _stats(np.full((5, 8), 1 / 8))
    assert s["norm_entropy"] == pytest.approx(1.0)
    assert s["entropy"] == pytest.approx(np.log(8))
    assert s["max_weight"] == pytest.approx(1 / 8)
    # statistics alone cannot tell an unused head from one that averages the input
    assert role_of(s) == UNIFORM_ROLE and "dead" not in role_of(s)


def test_ablation_decides_whether_a_uniform_head_is_dead_or_broad():
    from attnviz.analysis import HeadEffect

    def stat(head, role):
        values = dict.fromkeys(attnviz.analysis.METRICS, 0.5)
        return attnviz.analysis.HeadStats("cross", 0, head, **values, role=role)

    stats = [stat(0, UNIFORM_ROLE), stat(1, UNIFORM_ROLE), stat(2, UNIFORM_ROLE),
             stat(3, "reversal head"), stat(4, UNIFORM_ROLE)]  # fmt: skip
    effects = [
        HeadEffect("cross", 0, 0, changed_outputs=6, max_prob_change=0.9, mean_prob_change=0.2),
        HeadEffect("cross", 0, 1, changed_outputs=0, max_prob_change=0.001, mean_prob_change=0),
        HeadEffect("cross", 0, 2, changed_outputs=0, max_prob_change=0.2, mean_prob_change=0.01),
        HeadEffect("cross", 0, 3, changed_outputs=0, max_prob_change=0.0, mean_prob_change=0),
    ]
    roles = [s.role for s in with_ablation(stats, effects)]
    # changes outputs / moves probabilities: needed; changes nothing: dead; not measured: as is
    assert roles == [BROAD_ROLE, DEAD_ROLE, BROAD_ROLE, "reversal head", UNIFORM_ROLE]


def test_anti_diagonal_is_a_reversal_head():
    s = _stats(np.eye(7)[::-1])
    assert s["anti_diagonal"] == 1 and s["diagonal"] == pytest.approx(1 / 7)
    assert role_of(s) == "reversal head"


def test_anti_diagonal_uses_the_unpadded_length():
    # 3 real keys then 2 padded: row i should look at 2 - i
    w = np.zeros((3, 5))
    w[[0, 1, 2], [2, 1, 0]] = 1
    mask = np.zeros((3, 5), bool)
    mask[:, 3:] = True
    s = _stats(w, mask=mask)
    assert s["anti_diagonal"] == 1 and s["last"] == pytest.approx(1 / 3)


def test_previous_token_first_token_eos_and_distance():
    prev = np.eye(5, k=-1)
    prev[0, 0] = 1
    s = _stats(prev, mask=np.triu(np.ones((5, 5), bool), 1))
    assert s["previous"] == 1 and role_of(s) == "previous-token head"
    assert s["distance"] == pytest.approx(4 / 5)
    first = np.zeros((4, 4))
    first[:, 0] = 1
    assert _stats(first)["first"] == 1 and role_of(_stats(first)) == "first-token head"
    eos_keys = np.array([False, False, True, False])
    to_eos = np.zeros((4, 4))
    to_eos[:, 2] = 1
    s = _stats(to_eos, key_is_eos=eos_keys)
    assert s["eos"] == 1 and role_of(s) == "EOS head"
    assert np.isnan(_stats(to_eos)["eos"])  # unknown without key ids


def test_padded_and_fully_blocked_rows_are_left_out():
    w = np.eye(4)
    w[3] = 0.25  # a padded query row that happens to be uniform
    s = _stats(w, query_valid=np.array([True, True, True, False]))
    assert s["diagonal"] == 1 and s["norm_entropy"] == 0
    w2 = np.eye(3)
    w2[2] = 0
    mask = np.zeros((3, 3), bool)
    mask[2] = True  # a dead row: all keys blocked
    assert _stats(w2, mask=mask)["diagonal"] == 1


def test_head_stats_cover_every_head_of_a_recorded_trace():
    model = make_model()
    src, tgt, sp, tp = random_batch(model)
    with torch.no_grad(), attnviz.record(model) as trace:
        model(src, tgt, sp, tp)
    stats = head_stats(trace, sp, tp)
    assert len(stats) == 6 * model.config.n_heads
    assert {(s.kind, s.layer) for s in stats} == set(trace.keys())
    for s in stats:
        assert 0 <= s.norm_entropy <= 1 + 1e-9 and 0 < s.max_weight <= 1
        assert isinstance(s.role, str) and s.to_dict()["head"] == s.head


def test_a_head_forced_to_reverse_is_named_a_reversal_head():
    model = make_model()
    src, tgt, _, _ = random_batch(model, b=2, ts=7, tt=6)
    src[src == 0], tgt[tgt == 0] = 5, 5  # no padding: every row sees 7 keys
    mirror = torch.zeros(6, 7)
    mirror[torch.arange(6), 6 - torch.arange(6)] = 1.0
    edit = attnviz.ReplaceWeights("cross", 0, mirror, head=2)
    with torch.no_grad(), attnviz.record(model, [edit]) as trace:
        model(src, tgt)
    named = {(s.kind, s.layer, s.head): s for s in head_stats(trace)}
    assert named["cross", 0, 2].role == "reversal head"
    assert named["cross", 0, 2].anti_diagonal == pytest.approx(1.0)
    assert named["cross", 0, 1].anti_diagonal < 0.9
