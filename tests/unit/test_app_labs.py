"""The app's lab and model panels through the session layer: mask lab, ablation, health,
the status line, and the HTML report's contents."""

from __future__ import annotations

import numpy as np
import pytest

from attnviz.app import session
from attnviz.app.panels import labs


@pytest.fixture(scope="module")
def reverse_path(models_dir) -> str:
    return str(models_dir / "reverse")


@pytest.fixture(scope="module")
def done(reverse_path) -> session.SessionState:
    """helloworld decoded to the end on the shipped reversal model."""
    return session.run(session.new_state(reverse_path), "helloworld").state


# -- mask lab ----------------------------------------------------------------------------------
def test_mask_lab_drops_blocked_tokens_of_an_earlier_input(done):
    """Block 0 and 9 on helloworld, then Step on abcdef: the old ticks must not count."""
    ticks = labs.block_labels(done)
    assert ticks[0] == "0: h" and ticks[9] == "9: d"
    both = labs.mask_lab(done, blocked=[ticks[0], ticks[9]])
    assert "Blocked positions: 0, 9" in both.message
    new = session.step(done, "abcdef").state
    view = labs.mask_lab(new, blocked=[ticks[0], ticks[9]])
    assert not view.message.startswith("⚠"), view.message
    assert "0..5" not in view.message and "Blocked positions" not in view.message
    assert "earlier input" in view.message and len(view.figures) == 2
    # a tick of the new input still blocks
    kept = labs.mask_lab(new, blocked=[ticks[9], labs.block_labels(new)[2]])
    assert "Blocked positions: 2." in kept.message


# -- status line -------------------------------------------------------------------------------
def test_status_says_when_the_length_limit_forced_the_end(reverse_path, monkeypatch):
    """A folder whose generation config forces EOS at the length limit: the status line must
    not say the model produced it."""
    import dataclasses

    from attnviz.app import store
    from attnviz.decode.greedy import LogitRules

    real = store.get_checkpoint(reverse_path)
    eos = real.config.eos_id
    capped = dataclasses.replace(
        real, rules=LogitRules(forced_eos_id=eos, eos_id=eos), max_new_tokens=4
    )
    monkeypatch.setattr(store, "get_checkpoint", lambda path, device="cpu": capped)
    view = session.run(session.new_state(reverse_path), "helloworld")
    assert view.state.done and view.state.tokens[-1] == eos and len(view.state.tokens) == 4
    assert "forced" in view.message and "produced" not in view.message
    assert "length limit (4 tokens)" in view.message and "p = 0.000" in view.message
    # the model's own end is still reported as the model's
    monkeypatch.undo()
    own = session.run(session.new_state(reverse_path), "helloworld")
    assert "the model produced" in own.message and "forced" not in own.message


# -- head ablation -----------------------------------------------------------------------------
def test_ranking_replaces_the_ablation_chart(done):
    """After "Rank heads by effect" the chart shows the ranking its message explains."""
    ablated = labs.ablation(done, ["cross L0 H2"])
    assert ablated.figures[0].data[0].name == "all heads on"
    ranked = labs.rank_heads(done, n_inputs=3)
    assert len(ranked.figures) == 1 and "chart" in ranked.message
    assert f"Largest effect: **{ranked.rows[0][0]}** (changed" in ranked.message  # trained
    fig = ranked.figures[0]
    assert [t.name for t in fig.data] == ["max |Δp|", "mean |Δp|"]
    shown = ranked.rows[: labs.RANK_SHOWN]
    assert list(fig.data[0].customdata) == [r[0] for r in shown]
    np.testing.assert_allclose(fig.data[0].x, [r[2] for r in shown], atol=1e-4)


def test_an_output_that_is_eos_at_once_is_called_empty(done):
    """Zero every cross-attention head: the message names an empty output, never “”."""
    sites = [f"cross L{i} H{h}" for i in range(2) for h in range(4)]
    res = labs.ablation(done, sites)
    assert "→ (empty: EOS first)" in res.message and "“”" not in res.message
    assert labs.shown_output("") == "(empty: EOS first)" and labs.shown_output("ab") == "“ab”"
    # where it dropped most is a step counted from 1, as in the step view (not "token 0")
    ckpt = labs.started_checkpoint(done)
    drop = labs.analysis.ablate(ckpt, done.text, labs.parse_sites(sites)).prob_change
    worst = int(np.argmin(drop))
    assert f"at step {worst + 1} (" in res.message and "at token" not in res.message


# -- checkpoint health -------------------------------------------------------------------------
def test_health_of_a_model_without_a_task_checks_the_current_input(reverse_path, monkeypatch):
    import dataclasses

    from attnviz.app import store
    from attnviz.app.panels import health as health_panel

    real = store.get_checkpoint(reverse_path)
    no_task = dataclasses.replace(real, meta={k: v for k, v in real.meta.items() if k != "task"})
    assert no_task.task is None
    monkeypatch.setattr(store, "get_checkpoint", lambda path, device="cpu": no_task)
    fresh = session.new_state(reverse_path)
    assert "type an input" in health_panel.health(fresh).message  # nothing to check on yet
    state = session.step(fresh, "helloworld").state
    view = health_panel.health(state, "abc\n\n  xyz  \nhelloworld\n")
    assert not view.message.startswith("⚠"), view.message
    assert "Health check passed</b> on 3 given inputs" in view.message
    assert health_panel.health_inputs(state, "abc\nhelloworld") == ("helloworld", "abc")
    one = health_panel.health(state)
    assert "on 1 given input," in one.message and "1 given inputs" not in one.message
    # checked on the input, the report goes when another input is started, not with a step
    from attnviz.app import state as app_stamps

    assert one.on_input
    shown = {"health": app_stamps.panel_stamps(state)["health"]}
    assert app_stamps.follow(shown, session.step(state).state, "health").clear == frozenset()
    other = session.step(state, "abc").state
    assert app_stamps.follow(shown, other, "step").clear == {"health"}


def test_health_of_a_model_with_a_task_follows_the_model_not_the_input(reverse_path):
    from attnviz.app.panels import health as health_panel

    state = session.step(session.new_state(reverse_path), "helloworld").state
    assert not health_panel.health(state, n=16).on_input  # checked on the task's own inputs


def test_health_wording_agrees_with_itself(reverse_ckpt):
    """The header names the inputs the accuracy line used; "needed" heads change outputs."""
    import re

    from attnviz.analysis import health

    report = health.check(reverse_ckpt, n=16, ablation_sample=16)
    found = {f.check: f for f in report.findings}
    n_acc = found["accuracy"].details["n"]
    assert n_acc != 16 and f"on {n_acc} validation inputs" in found["accuracy"].message
    assert report.inputs.startswith("16 validation inputs")
    assert f"exact match on {n_acc} validation inputs" in report.inputs
    for words in found.get("broad heads", health.Finding("", "", "")).details.values():
        assert "changes 0 of" not in words and int(re.search(r"changes (\d+) of", words)[1]) > 0
    weak = found["weak heads"].details  # the shipped model has some (measured: 4 of 24)
    assert weak and all("changes none of 16 outputs" in w for w in weak.values())
    roles = {f"{s.kind} L{s.layer} H{s.head}": s.role for s in report.stats}
    assert all(roles[site] == health.WEAK_ROLE for site in weak)


def test_counts_read_as_words():
    from attnviz.core.errors import count

    assert count(1, "step") == "1 step" and count(2, "step") == "2 steps"
    assert count(0, "input") == "0 inputs" and count(1, "query", "queries") == "1 query"
    assert count(3, "query", "queries") == "3 queries"


def test_header_and_status_of_a_folder_without_a_task(reverse_path, monkeypatch):
    """No "task None" in the header; "1 step", never "1 steps"."""
    import dataclasses

    from attnviz.app import store
    from attnviz.app.state import describe
    from attnviz.decode.greedy import LogitRules

    real = store.get_checkpoint(reverse_path)
    eos = real.config.eos_id
    odd = dataclasses.replace(
        real,
        meta={k: v for k, v in real.meta.items() if k != "task"},
        rules=LogitRules(forced_eos_id=eos, eos_id=eos),
        max_new_tokens=1,
    )
    monkeypatch.setattr(store, "get_checkpoint", lambda path, device="cpu": odd)
    state = session.new_state(reverse_path)
    header = describe(state)
    assert "None" not in header and "no built-in task recorded" in header
    view = session.step(state, "helloworld")
    assert "Done after 1 step:" in view.message and "1 steps" not in view.message


def test_an_edited_input_that_was_not_run_is_noted(done):
    assert labs.edited_note(done, "helloworld") == ""
    note = labs.edited_note(done, "helloworl")
    assert "still show “helloworld”" in note and "Step" in note
    assert labs.edited_note(session.new_state(done.model), "abc") == ""  # nothing shown yet


def test_the_reports_mask_summary_counts_one_input(reverse_ckpt):
    from attnviz.analysis import masking

    summary = masking.causal_experiment(reverse_ckpt, ["hello"]).summary()
    assert "of 1 input;" in summary and "1 inputs" not in summary
