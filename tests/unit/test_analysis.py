"""Health check, ablation, mask experiments, attribution and export on the shipped models."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import attnviz
from attnviz.analysis import ablation, attribution, export, health, masking
from attnviz.analysis.stats import BROAD_ROLE, DEAD_ROLE
from attnviz.cli import main
from attnviz.core.record import DropMask

WORDS = ["helloworld", "abc", "attentionisallyouneed"[:20], "zyxwvuts", "q", "transformer"]


def test_health_check_passes_on_the_shipped_reverse_model(reverse_ckpt):
    report = health.check(reverse_ckpt, n=64, ablation_sample=16)
    assert report.passed, report.text()
    found = {f.check: f for f in report.findings}
    levels = {name: f.level for name, f in found.items()}
    assert levels["padding"] == "ok" and levels["causal"] == "ok" and levels["finite"] == "ok"
    assert levels["accuracy"] == "ok" and levels["recorded accuracy"] == "ok"
    assert found["accuracy"].details["exact_match"] == 1.0
    assert set(found["accuracy"].details["by_length"]) == {str(n) for n in range(1, 21)}
    assert (
        levels["task pattern"] == "ok"
        and "mirrored source position" in found["task pattern"].message
    )
    cross_roles = {s.role for s in report.stats if s.kind == "cross"}
    assert "reversal head" in cross_roles, report.stats
    data = json.loads(report.to_json())
    assert data["passed"] is True and len(data["head_stats"]) == len(report.stats)
    assert "verdict: PASS" in report.text()


def test_no_head_whose_zeroing_changes_outputs_is_called_dead(reverse_ckpt):
    """Statistics and ablation agree: a head is dead only if it looks unused AND zeroing it
    changes nothing (cross L0 H0 looks uniform but zeroing it changes most outputs)."""
    texts = [e.src for e in attnviz.tasks.get_task("reverse").examples("validation", 16, seed=0)]
    report = health.check(reverse_ckpt, texts=texts, ablation_sample=16)
    effects = {e.site: e for e in ablation.head_effects(reverse_ckpt, texts)}
    needed = {site for site, e in effects.items() if e.changed_outputs > 0}
    assert "cross L0 H0" in needed and len(needed) >= 8
    roles = {f"{s.kind} L{s.layer} H{s.head}": s.role for s in report.stats}
    found = {f.check: f for f in report.findings}
    dead = found["dead heads"].details if found["dead heads"].level == "warning" else {}
    for site in needed:
        assert "dead" not in roles[site], (site, roles[site])
        assert site not in dead, report.text()
    for site in dead:  # what is called dead changes nothing
        assert effects[site].changed_outputs == 0 and effects[site].max_prob_change < 0.01
        assert roles[site] == DEAD_ROLE or dead[site].startswith("silent"), (site, dead[site])
    assert roles["cross L0 H0"] == BROAD_ROLE
    assert "cross L0 H0" in found["broad heads"].details
    assert "changes" in found["broad heads"].details["cross L0 H0"]


def test_without_ablation_no_head_is_called_dead(reverse_ckpt):
    report = health.check(reverse_ckpt, n=16, ablation_sample=0)
    found = {f.check: f for f in report.findings}
    assert found["dead heads"].level == "info" and "not zeroed" in found["dead heads"].message
    assert "removable heads" not in found
    assert not any("dead" in s.role for s in report.stats)


@pytest.mark.parametrize("which, check", [("padding", "padding"), ("causal", "causal")])
def test_a_model_that_ignores_a_mask_fails_the_check(reverse_ckpt, which, check):
    report = health.check(reverse_ckpt, n=64, edits=[DropMask(which)], ablation_sample=0)
    assert not report.passed
    failed = {f.check for f in report.findings if f.level == "error"}
    # the leak is named; outputs may also go wrong (padded rows read PAD without its mask),
    # but no other leak is reported
    assert check in failed and failed - {"accuracy"} == {check}, report.text()
    assert "verdict: FAIL" in report.text()


def test_check_cli_exit_status_and_json(tmp_path, capsys, models_dir):
    out = tmp_path / "report.json"
    args = ["check", str(models_dir / "reverse"), "--n", "32", "--ablation-sample", "0"]
    assert main([*args, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["passed"] is True
    assert main([*args, "--drop-mask", "padding"]) == 1
    assert "[ERROR] padding: attention on padded keys" in capsys.readouterr().out


def test_ablating_every_cross_attention_head_breaks_reversal(reverse_ckpt):
    heads = ablation.all_heads(reverse_ckpt, kinds=["cross"])
    result = ablation.ablate(reverse_ckpt, "helloworld", heads)
    assert result.baseline == "dlrowolleh"
    assert result.changed and result.ablated != "dlrowolleh"
    assert result.prob_baseline.min() > 0.5
    assert result.prob_change.mean() < -0.5  # the right tokens lose most of their probability
    one = ablation.ablate(reverse_ckpt, "helloworld", [("encoder_self", 0, 0)])
    assert len(one.prob_change) == len(one.baseline_tokens) == 11


def test_head_ranking_puts_cross_attention_first(reverse_ckpt):
    effects = ablation.head_effects(reverse_ckpt, WORDS)
    assert len(effects) == len(ablation.all_heads(reverse_ckpt))
    scores = [(e.changed_outputs, e.mean_prob_change) for e in effects]
    assert scores == sorted(scores, reverse=True)
    assert effects[0].max_prob_change > 0.1


def test_lifting_the_causal_mask_changes_teacher_forced_accuracy(reverse_ckpt):
    exp = masking.causal_experiment(reverse_ckpt, WORDS)
    assert exp.before.token_acc > 0.95
    assert exp.after.token_acc != exp.before.token_acc
    assert exp.max_weight_change["decoder_self", 0] > 0.01
    assert exp.max_weight_change["encoder_self", 0] == 0  # the encoder has no causal mask
    diff = exp.weight_diff("decoder_self", 0)
    future = np.triu(np.ones(diff.shape[-2:], bool), 1)
    assert np.abs(diff[..., future]).max() > 0.01  # weight moved onto future positions
    assert "teacher-forced token accuracy" in exp.summary()


def test_padding_experiment_and_blocked_source_tokens(reverse_ckpt):
    exp = masking.padding_experiment(reverse_ckpt, ["ab", "helloworld", "xyz"])
    assert exp.before.outputs == ["ba", "dlrowolleh", "zyx"]
    assert exp.max_weight_change["cross", 0] > 0  # short rows now attend to PAD
    with pytest.raises(attnviz.InputError, match="different lengths"):
        masking.padding_experiment(reverse_ckpt, ["ab", "cd"])
    blocked = masking.block_source(reverse_ckpt, "helloworld", [0])
    w = blocked.after.trace.numpy("cross", 1)
    assert w[..., 0].max() == 0  # nobody attends to the blocked position
    assert blocked.after.outputs != blocked.before.outputs
    with pytest.raises(attnviz.InputError, match="0..9"):
        masking.block_source(reverse_ckpt, "helloworld", [10])


@pytest.mark.slow
def test_attribution_points_at_the_mirrored_source_token(reverse_ckpt):
    text = "helloworld"
    model = reverse_ckpt.model
    hits = 0
    for step in range(len(text)):
        a = attribution.attribute(reverse_ckpt, text, step, n_steps=24)
        assert np.isfinite(a.delta) and a.delta < 0.2
        assert a.ig_src.shape == (10,) and a.ig_tgt.shape == (step + 1,)
        assert a.gxi_src.shape == (10,)
        hits += int(np.argmax(a.ig_src)) == len(text) - 1 - step
        assert set(a.agreement) >= {"ig~rollout", "ig~cross L0", "gxi~rollout"}
    assert hits >= 7, hits
    for module in (model.src_embed, model.tgt_embed):
        assert not module._forward_hooks and not module._forward_pre_hooks
    assert all(p.grad is None for p in model.parameters())
    assert not model.training


def test_spearman():
    assert attribution.spearman(np.array([1, 2, 3.0]), np.array([10, 20, 30.0])) == 1.0
    assert attribution.spearman(np.array([1, 2, 3.0]), np.array([3, 2, 1.0])) == -1.0
    assert np.isnan(attribution.spearman(np.ones(3), np.arange(3.0)))


def test_inspect_exports_json_and_npz(reverse_ckpt, tmp_path):
    result = export.inspect_text(reverse_ckpt, "hello")
    assert result.output == "olleh" and result.out_tokens[-1] == "<eos>"
    assert result.probs.shape == (6, len(reverse_ckpt.tgt_tokenizer))
    data = json.loads(export.write_json(result, tmp_path / "t.json").read_text())
    assert data["output"] == "olleh" and len(data["attention"]["cross.1.weights"][0]) == 6
    arrays = np.load(export.write_npz(result, tmp_path / "t.npz"), allow_pickle=False)
    assert arrays["cross.0.weights"].shape == (4, 6, 5)
    np.testing.assert_allclose(arrays["cross.0.weights"].sum(-1), 1, atol=1e-5)
    assert list(arrays["src_tokens"]) == list("hello")


def test_inspect_html_is_offline(tmp_path, capsys, models_dir):
    page = tmp_path / "out.html"
    assert (
        main(["inspect", str(models_dir / "reverse"), "--text", "helloworld", "--html", str(page)])
        == 0
    )
    html = page.read_text()
    assert "dlrowolleh" in html and "window.AttnViz.drawReport(" in html  # the app's renderer
    # nothing is fetched: no tag loads a resource, and there is no URL at all
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=", html, re.I)
    assert not re.search(r"https?://|//cdn", html)


def test_inspect_cli_ablation_causal_and_png(tmp_path, capsys, models_dir):
    base = ["inspect", str(models_dir / "reverse"), "--text", "helloworld"]
    assert main([*base, "--ablate", "cross:1:0", "--ablate", "cross:1:1", "--causal-off"]) == 0
    out = capsys.readouterr().out
    assert "output: dlrowolleh" in out and "reversal head" in out
    assert "ablating cross:1:0, cross:1:1: output" in out
    assert "causal mask off: teacher-forced token accuracy" in out
    assert main([*base, "--ablate", "cross-1"]) == 2
    assert "KIND:LAYER:HEAD" in capsys.readouterr().err
    try:
        import kaleido  # noqa: F401
    except ImportError:
        assert main([*base, "--png", str(tmp_path / "png")]) == 2
        assert "camera button" in capsys.readouterr().err


def test_attribution_beside_decoding_in_another_thread(reverse_ckpt):
    """Attribution's hooks and backward pass stay off the shared model other users run."""
    import threading

    errors, outputs = [], []
    stop = threading.Event()

    def decode():
        while not stop.is_set():
            try:
                outputs.append(reverse_ckpt.predict("helloworld"))
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(repr(exc))

    worker = threading.Thread(target=decode)
    worker.start()
    try:
        for step in range(3):
            attribution.attribute(reverse_ckpt, "attention", step, n_steps=16)
    finally:
        stop.set()
        worker.join()
    assert not errors, errors[:3]
    assert outputs and set(outputs) == {"dlrowolleh"}
    assert all(p.grad is None for p in reverse_ckpt.model.parameters())


def test_blocking_and_padding_off_together_are_refused(reverse_ckpt):
    import torch

    blocked = torch.zeros(2, 10, dtype=torch.bool)
    blocked[0, :2] = True
    with pytest.raises(attnviz.InputError, match="cannot be combined"):
        masking.experiment("x", reverse_ckpt, ["helloworld", "abc"], None,
                           [DropMask("padding")], blocked=blocked)  # fmt: skip


def test_text_the_task_cannot_read_is_teacher_forced_on_the_models_own_output(models_dir):
    translate = attnviz.load_checkpoint(models_dir / "translate")
    exp = masking.causal_experiment(translate, ["hello there friend", "the dog sees a cat"])
    assert (
        exp.before.token_acc > 0.5
    )  # reference = own output for the first, the task's for the second
    assert "teacher-forced" in exp.summary()


def test_cli_refuses_bad_counts_and_unwritable_paths(capsys, models_dir):
    ckpt = str(models_dir / "reverse")
    assert main(["check", ckpt, "--n", "0"]) == 2
    assert "at least one input" in capsys.readouterr().err
    assert main(["evaluate", ckpt, "--per-length", "0"]) == 2
    assert "--per-length must be at least 1" in capsys.readouterr().err
    assert main(["inspect", ckpt, "--text", "abc", "--json", "/nonexistent/dir/x.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("attnviz: error:") and "\n" not in err


def test_predict_batch_refuses_what_predict_refuses(reverse_ckpt):
    with pytest.raises(attnviz.InputError, match="empty"):
        reverse_ckpt.predict_batch(["abc", ""])
