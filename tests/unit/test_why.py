"""Why this token: the logit lens, direct logit attribution (parts add up to the logit, in
float64, family by family), activation patching through recorder edits, information flow,
ZeroHeads at the input of the output projection, and one-line refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import direct_attribution, flow, lens_grid, logit_lens, patch
from attnviz.analysis.patching import PatchStream
from attnviz.checkpoint import Checkpoint
from attnviz.core.errors import InputError
from attnviz.core.record import ZeroHeads, record

INDUCTION = Path(__file__).resolve().parents[2] / "models" / "induction"
IDS = [1, 5, 9, 4, 7, 5, 9, 4, 3]

#: one config per family feature the attribution must add up through
FAMILIES = {
    "gpt2-layernorm-tied-learned": dict(norm="layer", positions="learned", tie_output=True,
                                        activation="gelu_new"),
    "llama-rms-untied-gqa": dict(norm="rms", positions="rotary", bias=False, gated_ff=True,
                                 activation="silu", n_kv_heads=2),
    "gemma3-offset-sandwich": dict(norm="rms", norm_offset=1.0, sandwich_norm=True,
                                   positions="rotary", bias=False, gated_ff=True, qk_norm=True,
                                   activation="gelu_tanh", scale_embeddings=True),
    "output-bias-untied": dict(norm="layer", positions="sinusoidal", output_bias=True),
    "t5-scale-enc-dec": dict(arch="encoder-decoder", norm="rms", positions="relative",
                             bias=False, scale_attention=False, tie_output=True,
                             share_embeddings=True, scale_decoder_output=True),
    "post-norm-layernorm": dict(norm_first=False, final_norm=False, norm="layer",
                                positions="sinusoidal"),
    "post-norm-final-norm-learned": dict(norm_first=False, final_norm=True, norm="layer",
                                         positions="learned", tie_output=True),
    "post-norm-enc-dec-marian": dict(arch="encoder-decoder", norm_first=False, final_norm=False,
                                     positions="sinusoidal", scale_embeddings=True,
                                     tie_output=True, share_embeddings=True, output_bias=True),
    "post-norm-rms-no-bias": dict(norm_first=False, norm="rms", bias=False),
}  # fmt: skip


def make_ckpt(seed: int = 0, **over) -> Checkpoint:
    """A random attnviz model (no tokenizer: inputs are ids), every weight random."""
    base = dict(src_vocab_size=23, tgt_vocab_size=23, d_model=32, n_heads=4,
                n_encoder_layers=0, n_decoder_layers=3, d_ff=48, dropout=0.0, norm_first=True,
                final_norm=True, max_len=32, arch="decoder-only")  # fmt: skip
    if over.get("arch") == "encoder-decoder":
        base["n_encoder_layers"] = 2
    cfg = attnviz.ModelConfig(**{**base, **over})
    torch.manual_seed(seed)
    model = attnviz.Transformer(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            norm = "norm" in name and name.endswith("weight") and not cfg.norm_offset
            p.copy_((1.0 if norm else 0.0) + 0.3 * torch.randn_like(p))
    return Checkpoint(model, None, None, cfg, {}, Path("."))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_parts_add_up_to_the_logit_in_float64(family):
    ckpt = make_ckpt(**FAMILIES[family])
    ckpt.model.double()
    for versus in (None, 3):
        d = direct_attribution(ckpt, IDS, versus=versus)
        assert abs(d.total - d.logit) < 1e-9 * max(1.0, abs(d.logit)), (family, d.text())
        assert abs(d.values().sum() - d.logit) < 1e-9 * max(1.0, abs(d.logit))
    d = direct_attribution(ckpt, IDS, center=False)
    assert abs(d.total - d.logit) < 1e-9 * max(1.0, abs(d.logit))
    kinds = {p.kind for p in d.parts}
    assert "head" in kinds and "mlp" in kinds
    if FAMILIES[family].get("arch") == "encoder-decoder":
        assert "cross_head" in kinds
    post_norm = FAMILIES[family].get("norm_first") is False
    assert ("norm_bias" in kinds) == (post_norm and FAMILIES[family].get("norm") != "rms")


def test_float32_run_adds_up_to_rounding_and_exports(tmp_path):
    ckpt = make_ckpt(**FAMILIES["gpt2-layernorm-tied-learned"])
    d = direct_attribution(ckpt, IDS, token=4, versus=7)
    assert abs(d.total - d.logit) < 1e-4
    assert d.head_grid().shape == (3, 4)
    assert json.loads(d.save(tmp_path / "d.json").read_text())["names"][0] == "embed"
    arrays = np.load(d.save(tmp_path / "d.npz"))
    assert arrays["values"].shape == (len(d.parts),)


def test_head_part_is_its_output_through_its_w_o_slice():
    """A head's part is z_h · W_O[:, h]ᵀ read into the unembedding; zeroing the head with
    ZeroHeads (at the input of the output projection) removes exactly that slice."""
    ckpt = make_ckpt(**FAMILIES["gpt2-layernorm-tied-learned"])
    model = ckpt.model.double()
    x = torch.tensor([IDS])
    attn = model.decoder.layers[1].self_attn
    with torch.no_grad(), record(model, streams=True) as tr:
        model(x)
    with torch.no_grad(), record(model, [ZeroHeads("decoder_self", 1, 2)], streams=True) as zr:
        model(torch.tensor([IDS]))
    # the attention output of layer 1 changes by exactly head 2's slice, bias untouched
    before, after = tr.stream("decoder", 1, "attn"), zr.stream("decoder", 1, "attn")
    z = tr.head_output("decoder_self", 1)[0, 2]  # [T, Dh]
    dh = attn.head_dim
    slice_ = z @ attn.out_proj.weight[:, 2 * dh : 3 * dh].T  # [T, D]
    torch.testing.assert_close(before[0] - after[0], slice_, rtol=1e-9, atol=1e-9)
    assert zr.head_output("decoder_self", 1)[0, 2].abs().max() == 0
    # with every head zeroed, what is left is the output bias
    with torch.no_grad(), record(model, [ZeroHeads("decoder_self", 1, [0, 1, 2, 3])],
                                 streams=True) as all_zero:  # fmt: skip
        model(torch.tensor([IDS]))
    left = all_zero.stream("decoder", 1, "attn")[0]
    torch.testing.assert_close(left, attn.out_proj.bias.expand_as(left), rtol=0, atol=1e-12)


def test_logit_lens_last_layer_is_the_model_and_grid_agrees():
    ckpt = make_ckpt(**FAMILIES["llama-rms-untied-gqa"])
    lens = logit_lens(ckpt, IDS, k=3)
    assert lens.layers == ["embed", "0", "1", "2"]
    with torch.no_grad():
        probs = ckpt.model(torch.tensor([IDS]))[0, -1].softmax(-1)
    assert lens.target_id == int(probs.argmax()) and lens.rank[-1] == 0
    assert lens.prob[-1] == pytest.approx(float(probs.max()), abs=1e-5)
    grid = lens_grid(ckpt, IDS, progress=False)
    assert grid.prob.shape == (4, len(IDS))
    np.testing.assert_allclose(grid.prob[:, -1], lens.prob, atol=1e-6)
    assert grid.targets[:-1] == IDS[1:]


def test_lens_of_a_decoding_step_and_of_a_masked_lm():
    s2s = make_ckpt(**FAMILIES["t5-scale-enc-dec"])
    lens = logit_lens(s2s, IDS, step=2)
    assert lens.position == 2 and len(lens.layers) == 4
    mlm = make_ckpt(arch="encoder-only", n_encoder_layers=2, n_decoder_layers=0,
                    head_transform=True, norm_first=False, final_norm=False)  # fmt: skip
    lens = logit_lens(mlm, IDS, step=3)
    assert lens.position == 3 and lens.layers == ["embed", "0", "1"]
    with pytest.raises(InputError, match="masked-LM head"):
        direct_attribution(mlm, IDS)


def test_bad_input_is_refused_in_one_line():
    ckpt = attnviz.load_checkpoint(INDUCTION)
    with pytest.raises(InputError, match=r"clean has 12 .*corrupted 11") as e:
        patch(ckpt, "abcdefabcde", "abcdxfabcd", "f", "x")
    assert "\n" not in str(e.value)
    with pytest.raises(InputError, match=r"'xy' is 2 tokens here \(x \| y\)"):
        patch(ckpt, "abcdefabcde", "abcdxfabcde", "xy", "f")
    with pytest.raises(InputError, match="no output head"):
        logit_lens(make_ckpt(arch="encoder-only", n_encoder_layers=1, n_decoder_layers=0,
                             lm_head=False), IDS)  # fmt: skip
    with pytest.raises(InputError, match="threshold must be in 0..1"):
        flow(make_ckpt(), IDS, threshold=1.5)


def test_patching_the_prev_token_head_kills_induction():
    """models/induction: noising the layer-0 previous-token head (the head induction_scores
    ranks first) with a prompt whose first 'e' is changed drops the in-context 'f' to the
    corrupted run's level; the induction heads of layer 1 carry it."""
    ckpt = attnviz.load_checkpoint(INDUCTION)
    scores = attnviz.analysis.induction_scores(ckpt, n=20)
    prev = int(scores.prev_token[0].argmax())
    r = patch(ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what="heads", direction="noising")
    assert r.axes == ("module", "head") and r.grid.shape == (2, 4)
    assert r.grid[0, prev] < 0.1  # killed
    assert r.clean_diff > 5 > r.corrupted_diff
    denoise = patch(ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what="resid")
    assert denoise.grid.shape == (2, 12)
    # the corrupted token's own stream entering layer 0 restores it all
    assert denoise.grid[0, 5] == pytest.approx(1.0, abs=1e-4)
    assert np.abs(denoise.grid[0, [0, 1, 2, 3, 4, 6]]).max() < 1e-4


@pytest.mark.parametrize("what", ["resid", "heads", "head_positions", "patterns"])
def test_patching_grids_and_their_gradient_estimate(what, tmp_path):
    ckpt = attnviz.load_checkpoint(INDUCTION)
    r = patch(ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what=what, method="both")
    shape = {"resid": (2, 12), "heads": (2, 4), "head_positions": (2, 4, 12),
             "patterns": (2, 4)}[what]  # fmt: skip
    assert r.grid.shape == r.approx.shape == shape
    assert set(r.agreement) == {"pearson", "max_abs_diff"}
    if what != "resid":
        assert r.agreement["pearson"] > 0.5
    doc = json.loads(r.save(tmp_path / "p.json").read_text())
    assert doc["axes"] == list(r.axes) and np.array(doc["grid"]).shape == shape
    assert np.load(r.save(tmp_path / "p.npz"))["grid"].shape == shape


def test_patching_a_head_at_every_position_is_the_heads_grid():
    ckpt = attnviz.load_checkpoint(INDUCTION)
    heads = patch(ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what="heads")
    # the pattern of a head whose values did not change is its output's only change at the
    # last position; patch every head there
    per = patch(ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what="head_positions")
    np.testing.assert_allclose(per.grid[1, :, -1], heads.grid[1], atol=1e-5)


def test_stream_edit_changes_the_run_and_is_gone_after():
    ckpt = make_ckpt()
    x = torch.tensor([IDS])
    with torch.no_grad():
        plain = ckpt.model(x)
        values = torch.zeros(1, len(IDS), 32)
        where = torch.zeros(1, len(IDS), dtype=torch.bool)
        where[0, -1] = True
        with record(ckpt.model, [PatchStream("decoder", 2, "resid_pre", values, where)],
                    capture=None):  # fmt: skip
            edited = ckpt.model(x)
        again = ckpt.model(x)
    assert not torch.allclose(edited[0, -1], plain[0, -1])
    torch.testing.assert_close(edited[0, :-1], plain[0, :-1])
    torch.testing.assert_close(again, plain)


def test_flow_routes_the_induction_through_the_earlier_f():
    ckpt = attnviz.load_checkpoint(INDUCTION)
    f = flow(ckpt, "abcdefabcde")
    routed = {f.edges[i].source for i in f.route}
    assert "x1_6" in routed  # the earlier 'f', after the previous-token head copied 'e' in
    assert all(e.weight >= 0.04 for e in f.edges)
    top = [f.edges[i] for i in f.route if f.edges[i].source == "x1_6"][0]
    assert top.heads[0][0] == int(attnviz.analysis.induction_scores(ckpt, n=20).induction[1]
                                  .argmax())  # fmt: skip
    assert json.loads(f.json())["route"] == f.route
    loose = flow(ckpt, "abcdefabcde", threshold=0.0)
    assert len(loose.edges) > len(f.edges)


def test_cli_why_patch_flow(tmp_path, capsys):
    from attnviz.cli.commands import main

    m = str(INDUCTION)
    assert main(["why", m, "--text", "abcdefabcde", "--out", str(tmp_path / "w.json")]) == 0
    assert "why 'f'" in capsys.readouterr().out
    assert json.loads((tmp_path / "w.json").read_text())["token"] == "f"
    assert (
        main(
            [
                "patch",
                m,
                "--clean",
                "abcdefabcde",
                "--corrupted",
                "abcdxfabcde",
                "--answer",
                "f",
                "--wrong",
                "x",
                "--what",
                "heads",
                "--out",
                str(tmp_path / "p.npz"),
            ]
        )
        == 0
    )
    assert np.load(tmp_path / "p.npz")["grid"].shape == (2, 4)
    assert main(["flow", m, "--text", "abcdefabcde"]) == 0
    assert "information flow" in capsys.readouterr().out
    assert (
        main(
            [
                "patch",
                m,
                "--clean",
                "abcdefabcde",
                "--corrupted",
                "abc",
                "--answer",
                "f",
                "--wrong",
                "x",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "clean has 12" in err and err.count("\n") == 1


#: bias-free families: every block's parts are the residual and what its sublayer wrote
BIAS_FREE = ["post-norm-rms-no-bias", "llama-rms-untied-gqa", "gemma3-offset-sandwich",
             "t5-scale-enc-dec"]  # fmt: skip


@pytest.mark.parametrize("family", BIAS_FREE)
def test_flow_importances_of_each_block_sum_to_one(family):
    """At threshold 0 every edge is kept: the importances into each block's output (residual,
    keys or the MLP) are its parts' proximities normalised per token, so they sum to 1 where
    no bias takes a share; heads' shares are at most 1."""
    ckpt = make_ckpt(**FAMILIES[family])
    ckpt.model.double()
    f = flow(ckpt, IDS, threshold=0.0)
    into: dict[str, float] = {}
    for e in f.edges:
        if f.nodes[e.target]["kind"] != "mlp":  # the edge into an MLP node is its input
            into[e.target] = into.get(e.target, 0.0) + e.weight
    assert into and all(abs(v - 1.0) < 1e-9 for v in into.values()), family
    assert all(0 <= w <= 1 + 1e-12 for e in f.edges for _, w in e.heads)


def test_flow_on_a_post_norm_encoder_decoder_reads_the_source_through_cross_attention():
    ckpt = make_ckpt(**FAMILIES["post-norm-enc-dec-marian"])
    f = flow(ckpt, IDS, threshold=0.0, step=2)
    assert f.source_tokens == [f"#{i}" for i in IDS] and f.position == 2
    cross = [e for e in f.edges if e.kind == "cross"]
    # one edge from each source position's encoder output into each decoder layer's query
    assert {e.source for e in cross} == {f"ex2_{j}" for j in range(len(IDS))}
    assert {e.target for e in cross} == {f"c{i}_{q}" for i in range(3) for q in range(3)}
    assert all(f.nodes[e.source]["stack"] == "encoder" for e in cross)
    routed = {f.edges[i].source for i in f.route}
    assert {"ex0_0", "ex2_0"} <= routed  # the route reaches the encoder's inputs
    assert f.token_of("ex0_3") == f"#{IDS[3]}" and json.loads(f.json())["source_tokens"]
    pruned = flow(ckpt, IDS, step=2)
    assert all(e.weight >= 0.04 for e in pruned.edges) and len(pruned.edges) < len(f.edges)


def test_post_norm_shipped_models_attribute_and_flow():
    """models/reverse-gpt (post-norm, decoder-only) and models/reverse-bert (post-norm masked
    LM): the parts add up to the model's logit; the flow has a route to the prediction."""
    gpt = attnviz.load_checkpoint(INDUCTION.parent / "reverse-gpt")
    d = direct_attribution(gpt, "helloworld")
    assert abs(d.total - d.logit) < 1e-4 and any(p.kind == "norm_bias" for p in d.parts)
    assert flow(gpt, "helloworld").route
    bert = attnviz.load_checkpoint(INDUCTION.parent / "reverse-bert")
    assert flow(bert, "helloworld").route


def test_a_grid_over_its_time_budget_is_refused_after_one_batch():
    from attnviz.analysis.patching import TooLong

    ckpt = attnviz.load_checkpoint(INDUCTION)
    with pytest.raises(TooLong, match=r"patching head_positions takes 4 batched runs, about") as e:
        patch(ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what="head_positions", budget_s=0.0)
    assert e.value.seconds > 0 and "attribution patching" in str(e.value)
    ok = patch(ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what="heads", budget_s=3600.0)
    assert ok.grid.shape == (2, 4)


@pytest.mark.parametrize(
    "what, cell", [("resid", (0, 5)), ("heads", (0, 0)), ("head_positions", (1, 2, 11)),
                   ("patterns", (1, 3))],
)  # fmt: skip
def test_a_patched_cell_opened_on_its_own_is_the_grid_cell_and_recorded(what, cell):
    from attnviz.analysis.patched_run import patched_run

    ckpt = attnviz.load_checkpoint(INDUCTION)
    args = (ckpt, "abcdefabcde", "abcdxfabcde", "f", "x", what)
    grid = patch(*args, direction="noising").grid
    one = patched_run(*args, cell, direction="noising", k=3)
    assert one.metric == pytest.approx(grid[cell], abs=1e-5)
    assert len(one.top_tokens) == 3 and one.probs[0] >= one.probs[-1]
    assert one.trace.weights("decoder_self", 1).shape == (1, 4, 12, 12)
    if what == "heads" and cell == (0, 0):  # the previous-token head: 'f' is no longer top
        assert one.top_tokens[0] != "f" and one.clean_probs[0] < one.probs[0]
    assert json.loads(one.json())["cell"][0] in ("0", "1", "decoder_self 0", "decoder_self 1")
    with pytest.raises(InputError, match="cell is"):
        patched_run(*args, (9, 9, 9, 9))
