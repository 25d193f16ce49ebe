"""Direct logit attribution and activation patching held to TransformerLens (its
``TransformerBridge`` in compatibility mode without weight processing: no folded norms, no
centred weights) on the same random GPT-2 folder."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import direct_attribution, patch
from tests.hf_families import gpt2_text_folder

pytest.importorskip("transformer_lens")
transformers = pytest.importorskip("transformers")

CLEAN = [5, 17, 33, 8, 21, 40, 17, 33]
CORRUPTED = [5, 17, 33, 8, 21, 40, 60, 33]
ANSWER, WRONG = 8, 12


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(attnviz checkpoint, TransformerLens bridge) of one random GPT-2 folder."""
    from transformer_lens.model_bridge import TransformerBridge

    folder = tmp_path_factory.mktemp("gpt2")
    hf, _ = gpt2_text_folder(folder)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = TransformerBridge.boot_transformers(str(folder), hf_model=hf, tokenizer=tok)
        bridge.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    return attnviz.load_checkpoint(folder), bridge


def test_direct_attribution_equals_transformer_lens(pair):
    ckpt, bridge = pair
    ours = direct_attribution(ckpt, CLEAN, token=ANSWER, versus=WRONG)
    with torch.no_grad():
        _, cache = bridge.run_with_cache(torch.tensor([CLEAN]))
    # TransformerLens's apply_ln leaves the final norm's weight to be folded into W_U;
    # without weight processing it is applied here
    gain = bridge.ln_final.w.detach()
    direction = gain * (bridge.W_U[:, ANSWER] - bridge.W_U[:, WRONG]).detach()  # [D]
    heads = cache.stack_head_results(layer=-1, pos_slice=-1, apply_ln=True)  # [L*H, 1, D]
    theirs = (heads[:, 0].detach() @ direction).double().numpy()
    np.testing.assert_allclose(ours.head_grid().ravel(), theirs, atol=2e-5)
    parts, labels = cache.decompose_resid(layer=-1, pos_slice=-1, apply_ln=True,
                                          return_labels=True)  # fmt: skip
    theirs = dict(zip(labels, (parts[:, 0].detach() @ direction).tolist(), strict=True))
    values = dict(zip(ours.names(), ours.values().tolist(), strict=True))
    for layer in range(2):
        mlp = values[f"L{layer} mlp"] + values[f"L{layer} mlp bias"]
        assert mlp == pytest.approx(theirs[f"{layer}_mlp_out"], abs=2e-5)
        attn = sum(values[f"L{layer}H{h}"] for h in range(4)) + values[f"L{layer} attn bias"]
        assert attn == pytest.approx(theirs[f"{layer}_attn_out"], abs=2e-5)
    assert values["embed"] == pytest.approx(theirs["embed"], abs=2e-5)
    assert values["positions"] == pytest.approx(theirs["pos_embed"], abs=2e-5)


@pytest.mark.parametrize(
    "what, tl_name",
    [("resid", "get_act_patch_resid_pre"), ("heads", "get_act_patch_attn_head_out_all_pos"),
     ("head_positions", "get_act_patch_attn_head_out_by_pos"),
     ("patterns", "get_act_patch_attn_head_pattern_all_pos")],
)  # fmt: skip
def test_patching_grids_equal_transformer_lens(pair, what, tl_name):
    from transformer_lens import patching

    ckpt, bridge = pair
    ours = patch(ckpt, CLEAN, CORRUPTED, ANSWER, WRONG, what=what)
    clean, corrupted = torch.tensor([CLEAN]), torch.tensor([CORRUPTED])
    with torch.no_grad():
        clean_logits, cache = bridge.run_with_cache(clean)
        corr_logits = bridge(corrupted)

    def diff(logits):
        return logits[0, -1, ANSWER] - logits[0, -1, WRONG]

    lo, hi = diff(corr_logits), diff(clean_logits)

    def metric(logits):
        return (diff(logits) - lo) / (hi - lo)

    with torch.no_grad():
        theirs = (
            getattr(patching, tl_name)(bridge, corrupted, cache, metric).detach().double().numpy()
        )
    if what == "head_positions":
        theirs = theirs.transpose(0, 2, 1)  # [L, T, H] -> [L, H, T]
    np.testing.assert_allclose(ours.grid, theirs, atol=1e-4)
