"""The Similarity tab: sentence A (the input box above by default), B and an optional C, a
Compare button, and what :func:`attnviz.app.similarity_view.compare` returns; its events.

Computed when Compare asks (named API endpoint ``similarity``:
``Client(url).predict(a, b, c, input, theme, api_name="/similarity")``), never on a Step;
cleared with the "changed since" note when the model changes (:func:`cleared`, called by
:meth:`attnviz.app.ui.Page.follow`).
"""

from __future__ import annotations

import gradio as gr

from ..pagetext import STALE, THEME_JS
from ..state import panel_stamps as stamp
from ..ui_common import FAST, HIDDEN, MODEL_EVENTS, dark, shown_plot
from . import Face
from . import similarity as sv


def layout(p) -> None:
    """The tab's layout: the three sentences, Compare and the JSON download, the results."""
    my = p.part("similarity")
    with gr.Tab("Similarity", elem_id="tab-similarity") as my.sim_tab:
        gr.Markdown(sv.INTRO, elem_classes="explain")
        my.sim_note = gr.Markdown(visible=False, elem_id="similarity-note", elem_classes="explain")
        with gr.Column() as my.sim_body:
            with gr.Row(equal_height=True):
                my.sim_a = gr.Textbox(
                    label="sentence A", placeholder="empty: the input box above", lines=2,
                    elem_id="similarity-a",
                )  # fmt: skip
                my.sim_b = gr.Textbox(label="sentence B", lines=2, elem_id="similarity-b")
                my.sim_c = gr.Textbox(
                    label="sentence C (optional: is B or C closer to A?)", lines=2,
                    elem_id="similarity-c",
                )  # fmt: skip
            with gr.Row():
                my.sim_btn = gr.Button(
                    "Compare", variant="primary", elem_id="similarity-btn", scale=0
                )
                my.sim_json = gr.DownloadButton(
                    "Download JSON", visible=False, elem_id="similarity-json", scale=0, size="sm"
                )
            my.sim_msg = gr.Markdown(elem_id="similarity-message")
            with gr.Row():
                with gr.Column(scale=3):
                    my.sim_pairs = gr.Plot(
                        label="token pairs: A (rows) × B (columns)", elem_id="similarity-pairs",
                        visible=False,
                    )  # fmt: skip
                with gr.Column(scale=1, min_width=220):
                    my.sim_top = gr.Markdown(elem_id="similarity-top")
            my.sim_shares = gr.Plot(
                label="each token's share", elem_id="similarity-shares", visible=False
            )
            my.sim_ig = gr.Plot(
                label="Integrated Gradients", elem_id="similarity-ig", visible=False
            )
            my.sim_ig_msg = gr.Markdown(elem_id="similarity-ig-message")
            my.sim_rank = gr.Markdown(elem_id="similarity-rank")
            my.sim_rank_plot = gr.Plot(
                label="the closer sentence's pairs", elem_id="similarity-rank-pairs",
                visible=False,
            )  # fmt: skip


def outputs(p) -> list:
    """The tab's result components (the panels :meth:`Page.follow` clears)."""
    my = p.part("similarity")
    return [my.sim_msg, my.sim_pairs, my.sim_top, my.sim_shares, my.sim_ig, my.sim_ig_msg,
            my.sim_rank, my.sim_rank_plot, my.sim_json, my.sim_note, my.sim_body]  # fmt: skip


def cleared(p, state) -> dict:
    """The tab emptied after the model changed: the "changed since" note for a sentence
    embedder, the one line saying what the tab is for otherwise (its body hidden)."""
    my = p.part("similarity")
    why = sv.note(state)
    empty = {
        c: shown_plot(None) for c in (my.sim_pairs, my.sim_shares, my.sim_ig, my.sim_rank_plot)
    }
    return {
        **empty, my.sim_top: "", my.sim_ig_msg: "", my.sim_rank: "",
        my.sim_msg: "" if why else STALE, my.sim_json: gr.DownloadButton(value=None, visible=False),
        my.sim_note: gr.Markdown(value=why, visible=bool(why)),
        my.sim_body: gr.Column(visible=not why),
    }  # fmt: skip


def faces(p) -> list[Face]:
    """The tab's result, emptied when the model changes (:func:`cleared`)."""
    return [Face(sv.PANEL, outputs(p), clear=lambda s, v: cleared(p, s))]


def wire(p) -> None:
    """Compare (named ``similarity``), the tab's select (A filled from the input box when
    empty, the note for a model that embeds nothing, the tab tracked in ``p.active``) and the
    note or body following the model (on the header's change)."""
    my = p.part("similarity")
    outs = outputs(p)

    def run(state, stamps, a, b, c, text, theme):
        view = sv.compare(state, a, b, c, text)
        figs = dark([view.pairs, view.shares, view.ig, view.rank_pairs], theme)
        path = sv.write_json(view.data)
        why = sv.note(state)
        stamps = {**stamps, sv.PANEL: stamp(state)[sv.PANEL]}
        return (
            view.message, shown_plot(figs[0]), view.top, shown_plot(figs[1]),
            shown_plot(figs[2]), view.ig_message, view.rank, shown_plot(figs[3]),
            gr.DownloadButton(value=path, visible=path is not None),
            gr.Markdown(value=why, visible=bool(why)), gr.Column(visible=not why), stamps,
        )  # fmt: skip

    gr.on(
        [my.sim_btn.click, my.sim_b.submit, my.sim_c.submit],
        run, [p.state, p.stamps, my.sim_a, my.sim_b, my.sim_c, p.input_text, p.theme],
        [*outs, p.stamps], js=THEME_JS, api_name="similarity", **MODEL_EVENTS,
    )  # fmt: skip

    def opened(state, stamps, a, text):
        why = sv.note(state)
        stamps = {**stamps, sv.PANEL: stamp(state)[sv.PANEL]}  # a model change updates the tab
        a = a if (a or "").strip() or why else (text or "")
        return (a, gr.Markdown(value=why, visible=bool(why)), gr.Column(visible=not why),
                "similarity", stamps)  # fmt: skip

    def shown(state):
        why = sv.note(state)
        return gr.Markdown(value=why, visible=bool(why)), gr.Column(visible=not why)

    # the header is renewed after every model change (menu, upload, page load): the tab's body
    # or its one line follows, also where no result was stamped for the follow to clear
    p.model_info.change(shown, [p.state], [my.sim_note, my.sim_body], **HIDDEN, **FAST)
    my.sim_tab.select(
        opened, [p.state, p.stamps, my.sim_a, p.input_text],
        [my.sim_a, my.sim_note, my.sim_body, p.active, p.stamps], **HIDDEN, **FAST,
    )  # fmt: skip
