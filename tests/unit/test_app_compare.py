"""The Compare tab (two checkpoints side by side) and the beam panel, without and with a browser."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import attnviz
from attnviz.analysis import compare as analysis_compare
from attnviz.app import session, store
from attnviz.app import state as app_stamps
from attnviz.app.panels import compare as compare_lab
from attnviz.core.model import KINDS
from attnviz.render import plots


@pytest.fixture(scope="module")
def done(models_dir) -> session.SessionState:
    """helloworld decoded to the end on the shipped reversal model."""
    return session.run(session.new_state(str(models_dir / "reverse")), "helloworld").state


def test_comparing_a_model_with_itself_gives_an_all_zero_grid(done):
    view = compare_lab.compare(done, "reverse", "cross", "L1", "H2")
    assert view.comparison is not None and not view.message.startswith("⚠")
    for kind, fig in zip(KINDS, view.grids, strict=True):
        z = np.asarray(fig.data[0].z)
        assert z.shape == (2, 4) and np.allclose(z, 0, atol=1e-9), kind
        assert "→H" in fig.data[0].text[0][0]
    # the head drawn: A and B identical, A − B exactly 0, the shared mask grey in both
    a, b, diff = (t for t in view.head.data if t.name in ("A", "B", "A - B"))
    assert np.array_equal(np.nan_to_num(a.z), np.nan_to_num(b.z))
    assert np.nanmax(np.abs(diff.z)) == 0
    assert "same output" in view.message
    # nothing changed: no "most changed head" at 0.000
    assert "most changed" not in view.message.lower() and "No head differs" in view.message
    assert view.tokens_html.count('class="av-cmp-tok"') == len("dlrowolleh") + 1  # + EOS


def test_comparing_reverse_with_copy_gives_what_the_library_gives(done, models_dir):
    view = compare_lab.compare(done, "copy", "decoder_self", "L0", "H1")
    ref = analysis_compare(
        attnviz.load_checkpoint(models_dir / "reverse"),
        attnviz.load_checkpoint(models_dir / "copy"),
        ["helloworld"],
    )
    for kind, fig in zip(KINDS, view.grids, strict=True):
        assert np.allclose(np.asarray(fig.data[0].z), ref.divergence[kind], atol=1e-6)
        cells = np.asarray(fig.data[0].text)  # the matched head of b, written in each cell
        for (layer, head), b_head in np.ndenumerate(ref.matching[kind]):
            assert cells[layer, head].endswith(f"→H{b_head}")
    assert ref.divergence["cross"].max() > 0.05  # the two models attend differently
    assert view.comparison.outputs == ref.outputs
    # the grid names what it compares, so it stays labelled whatever the message says later
    assert "A = <b>reverse</b>" in view.grid_html and "B = <b>copy</b>" in view.grid_html
    # A | B | A − B: the difference is the difference of the two heads as recorded
    a, b, diff = (t for t in view.head.data if t.name in ("A", "B", "A - B"))
    assert np.allclose(np.nan_to_num(diff.z), np.nan_to_num(a.z) - np.nan_to_num(b.z))
    assert view.head.layout.coloraxis2.cmin == -view.head.layout.coloraxis2.cmax  # centred on 0
    # the token strip: each token's hover names both probabilities and ranks
    first = ref.tokens[0][0]
    assert f"A: p={first.prob_a:.4f}, rank {first.rank_a}" in view.tokens_html
    assert f"B: p={first.prob_b:.4f}, rank {first.rank_b}" in view.tokens_html


def test_incomparable_models_say_why_in_one_line(done):
    view = compare_lab.compare(done, "translate")
    # says what differs, not only that something does
    assert view.message.startswith("⚠ the checkpoints use different source tokenizers: ")
    assert ": A has a char tokenizer of 30 tokens, B has a word tokenizer of " in view.message
    assert view.comparison is None and len(view.grids) == len(KINDS)
    assert "\n" not in view.message


def test_compare_needs_an_input_and_a_real_head(models_dir, done):
    fresh = session.new_state(str(models_dir / "reverse"))
    assert compare_lab.compare(fresh, "copy").message.startswith("⚠ type an input")
    assert "head 9 does not exist" in compare_lab.compare(done, "copy", "cross", "L0", "H9").message
    assert compare_lab.model_choices(done)[:2] == ["reverse", "copy"]


def test_a_compare_result_goes_stale_with_a_new_input_not_with_a_step(done):
    shown = {"compare": app_stamps.panel_stamps(done)["compare"]}
    assert not app_stamps.stale_panels(shown, session.back(done).state)
    assert app_stamps.follow(shown, session.start(done, "abc").state, "compare").clear == {
        "compare"
    }


# -- the clickable grid and model B uploaded in the tab -------------------------------------------
CELL = re.compile(
    r'<button[^>]*class="av-aer av-cmp-cell( best)?"[^>]*data-kind="(\w+)" data-layer="(\d+)" '
    r'data-head="(\d+)"[^>]*><span>([\d.]+)</span><span class="av-cmp-match( av-cmp-moved)?">'
    r"→H(\d+)</span></button>"
)


def _cells(grid: str) -> dict[tuple[str, int, int], tuple[float, int, bool, bool]]:
    """(kind, layer, head) -> (divergence shown, matched head of B, underlined, drawn)."""
    return {
        (k, int(ly), int(h)): (float(d), int(j), bool(moved), bool(best))
        for best, k, ly, h, d, moved, j in CELL.findall(grid)
    }


def test_grid_cells_carry_their_head_the_divergence_and_the_matching(done, models_dir):
    view = compare_lab.compare(done, "copy", "decoder_self", "L1", "H3")
    ref = view.comparison
    cells = _cells(view.grid_html)
    assert len(cells) == sum(d.size for d in ref.divergence.values())  # every head, once
    for kind in KINDS:
        for (layer, head), d in np.ndenumerate(ref.divergence[kind]):
            shown, matched, moved, drawn = cells[kind, layer, head]
            assert shown == pytest.approx(d, abs=5e-4)
            assert matched == ref.matching[kind][layer, head] and moved == (matched != head)
            assert drawn == ((kind, layer, head) == ("decoder_self", 1, 3))
    assert compare_lab.error_view(ValueError("x")).grid_html == ""


def _permuted_copy(models_dir: Path, folder: Path, perm: list[int]) -> Path:
    """models/reverse with the heads of encoder self-attention layer 0 reordered by ``perm``."""
    ckpt = attnviz.load_checkpoint(models_dir / "reverse")
    model = ckpt.model
    attn = model.encoder.layers[0].self_attn
    dh = model.config.head_dim
    rows = torch.cat([torch.arange(p * dh, (p + 1) * dh) for p in perm])  # [H * Dh]
    d = model.config.d_model
    with torch.no_grad():
        for part in range(3):  # q, k, v blocks of in_proj
            block = slice(part * d, (part + 1) * d)
            attn.in_proj_weight[block] = attn.in_proj_weight[block][rows].clone()
            attn.in_proj_bias[block] = attn.in_proj_bias[block][rows].clone()
        attn.out_proj.weight[:] = attn.out_proj.weight[:, rows].clone()
    meta = {k: v for k, v in ckpt.meta.items() if k in ("task",)}
    return attnviz.save_checkpoint(folder, model, ckpt.src_tokenizer, ckpt.tgt_tokenizer, meta)


def test_the_grid_shows_heads_matched_to_other_heads(done, models_dir, tmp_path):
    """A copy whose encoder heads are permuted: same outputs, each head matched to its twin."""
    perm = [2, 0, 3, 1]
    folder = _permuted_copy(models_dir, tmp_path / "permuted", perm)
    view = compare_lab.compare(done, str(folder), "encoder_self", "L0", "H0")
    assert "same output" in view.message, view.message
    cells = _cells(view.grid_html)
    for head in range(4):
        shown, matched, moved, _ = cells["encoder_self", 0, head]
        assert matched == perm.index(head) and moved == (matched != head)
    assert view.comparison.matched_divergence["encoder_self"][0] == pytest.approx(0, abs=1e-6)


def test_a_clicked_cell_reads_back_as_the_head_it_draws(done):
    assert compare_lab.parse_pick("cross 1 2") == ("cross", "L1", "H2")
    for bad in ("", "cross 1", "cross one 2", "sideways 0 0", "cross 1 2 3"):
        with pytest.raises(attnviz.AttnvizError, match="not a head|unknown attention kind 'side"):
            compare_lab.parse_pick(bad)
    view = compare_lab.compare(done, "copy", *compare_lab.parse_pick("encoder_self 1 3"))
    assert "encoder self-attention · layer 1 · head 3" in view.head.layout.title.text.lower()


def test_model_b_uploaded_in_the_tab_is_compared(done, models_dir, tmp_path):
    files = [str(models_dir / "copy" / n) for n in ("model.safetensors", "config.json")]
    name, why = compare_lab.upload_b(files)
    assert name and why == ""
    assert name in compare_lab.model_choices(done)
    uploaded = compare_lab.compare(done, name)
    by_menu = compare_lab.compare(done, "copy")
    for kind in KINDS:  # the same weights: equal up to the order of float sums (threads)
        np.testing.assert_allclose(
            uploaded.comparison.divergence[kind], by_menu.comparison.divergence[kind],
            rtol=0, atol=1e-6,
        )  # fmt: skip


def test_a_refused_upload_for_b_says_why_and_leaves_nothing(tmp_path):
    uploads = store.private_dir("uploads")
    before = sorted(uploads.rglob("*"))
    pickle = tmp_path / "model.pt"
    torch.save({"w": torch.zeros(2)}, pickle)
    name, why = compare_lab.upload_b([str(pickle)])
    assert name is None and why.startswith("⚠") and "pickle" in why and "\n" not in why
    garbage = tmp_path / "model.safetensors"
    garbage.write_bytes(b"not a tensor file at all")
    name, why = compare_lab.upload_b([str(garbage)])
    assert name is None and why.startswith("⚠")
    assert compare_lab.upload_b([])[0] is None
    assert sorted(uploads.rglob("*")) == before


def test_beam_panel_follows_the_checkpoints_length_limit(models_dir, tmp_path):
    folder = tmp_path / "reverse-short"
    shutil.copytree(models_dir / "reverse", folder)
    state = session.new_state(str(folder))
    ckpt = store.get_checkpoint(folder)  # the app's own copy of this folder
    # what a Hugging Face folder's generation config sets, in the one place every decode asks
    ckpt.decoding = dataclasses.replace(ckpt.decoding, max_new=3)
    out = session.beam(state, 4, text="helloworld")
    assert "<b>dlr</b>" in out, out  # beam search stops at the limit, as greedy does
    assert "the same as greedy <b>dlr</b>" in out


def test_plots_refuse_a_matching_of_another_shape():
    with pytest.raises(attnviz.AttnvizError, match="does not fit"):
        plots.head_divergence(np.zeros((2, 4)), np.zeros((2, 3), dtype=int))
    with pytest.raises(attnviz.AttnvizError, match="differ in shape"):
        plots.attention_difference(np.zeros((2, 3)), np.zeros((3, 3)), None, None)
