"""The "Why this token" tab: direct attribution, the logit lens, patching and information flow
of the token at the step shown, each computed when its button asks (never on a Step) by
:mod:`attnviz.app.panels.why`, with a JSON download of its result; and its events.

Named API endpoints ``why_attribution``, ``why_lens``, ``why_grid``, ``why_patch``,
``why_cell`` (a patching cell opened), ``why_flow`` and ``why_edge`` (a flow edge opened)
(``Client(url).predict(versus, "light", api_name="/why_attribution")``). The patching grid
and the flow graph last computed are kept (``my.why_kept``, with the state they explain) for
opening their edges and for the Export tab's HTML report. Each
panel is stamped with the state it shows and cleared with the "changed since" note when the
model, input or step changes (:func:`follow`, called by :meth:`attnviz.app.ui.Page.follow`).
"""

from __future__ import annotations

import gradio as gr

from ..pagetext import STALE, THEME_JS
from ..state import Follow
from ..state import panel_stamps as stamp
from ..ui_common import FAST, HIDDEN, INTERNAL, MODEL_EVENTS, STALE_OK, dark, kind_note, shown_plot
from . import why as wv
from . import why_routes as wr
from .registry import Face

# a click on an attention edge of the flow graph (plotly's hovered point, the edge's index in
# its customdata) hands the index to the hidden pick button's event (EDGE_JS reads it)
EDGE_ON_LOAD = """
if (!window.AVFlowHook) {
  window.AVFlowHook = true;
  document.addEventListener('click', (ev) => {
    const gd = ev.target.closest && ev.target.closest('#why-flow-plot .js-plotly-plot');
    if (!gd) return;
    const pt = (gd._hoverdata || []).find((p) => p.data && /^(attention|cross) edges$/
      .test(p.data.name) && p.customdata !== undefined);
    if (!pt) return;
    window.AVFlowEdge = String(pt.customdata);
    const go = document.querySelector('#why-edge-pick-btn');
    if (go) go.click();
  }, true);
}
"""
EDGE_JS = (
    "(...a) => { a[a.length - 2] = window.AVFlowEdge || ''; a[a.length - 1] = "
    "document.body.classList.contains('dark') ? 'dark' : 'light'; return a; }"
)


def layout(p) -> None:
    """The tab's layout: one section per analysis, each with its button, message, figure (the
    lens: a table too) and JSON download."""
    my = p.part("why")
    with gr.Tab("Why this token", elem_id="tab-why") as my.why_tab:
        gr.Markdown(wv.INTRO, elem_classes="explain")
        gr.Markdown("### Direct attribution")
        with gr.Row(equal_height=True):
            my.why_versus = gr.Dropdown(
                label="…and not this token (optional: a candidate of the step, or type a token "
                "or #id)", choices=[], value=None, allow_custom_value=True, scale=4,
                elem_id="why-versus",
            )  # fmt: skip
            my.why_dla_btn = gr.Button(
                "Attribute", variant="primary", scale=0, elem_id="why-dla-btn"
            )
            my.why_dla_json = _download("why-dla-json")
        my.why_dla_msg = gr.Markdown(elem_id="why-dla-message")
        my.why_dla_plot = gr.Plot(label="direct attribution", visible=False, elem_id="why-dla-plot")
        gr.Markdown("### Logit lens")
        with gr.Row():
            my.why_lens_btn = gr.Button("Lens at this position", scale=0, elem_id="why-lens-btn")
            my.why_grid_btn = gr.Button("Whole grid", scale=0, elem_id="why-grid-btn")
            my.why_lens_json = _download("why-lens-json")
        my.why_lens_msg = gr.Markdown(elem_id="why-lens-message")
        my.why_lens_table = gr.Dataframe(
            headers=wv.LENS_HEADERS, interactive=False, visible=False, wrap=True,
            elem_id="why-lens-table",
        )  # fmt: skip
        my.why_grid_plot = gr.Plot(label="logit lens grid", visible=False, elem_id="why-grid-plot")
        gr.Markdown("### Activation patching")
        kind_note(p, "patch")  # a speech model: a clip has no corruption to type
        with gr.Column() as p.kind_bodies["patch"]:
            with gr.Row(equal_height=True):
                my.why_corrupted = gr.Textbox(
                    label="corrupted input (as many tokens as the input)", scale=3,
                    elem_id="why-corrupted",
                )  # fmt: skip
                my.why_answer = gr.Textbox(
                    label="answer", placeholder="default: the token produced", scale=1,
                    elem_id="why-answer",
                )  # fmt: skip
                my.why_wrong = gr.Textbox(
                    label="wrong token", placeholder="default: the runner-up", scale=1,
                    elem_id="why-wrong",
                )  # fmt: skip
            with gr.Row(equal_height=True):
                my.why_what = gr.Radio(
                    list(wv.WHATS), value="resid", label="patch", scale=3, elem_id="why-what"
                )
                my.why_direction = gr.Radio(
                    ["denoising", "noising"], value="denoising", label="direction", scale=2,
                    elem_id="why-direction",
                )  # fmt: skip
                my.why_patch_btn = gr.Button("Run patching", scale=0, elem_id="why-patch-btn")
                my.why_patch_json = _download("why-patch-json")
            my.why_patch_msg = gr.Markdown(elem_id="why-patch-message")
            my.why_patch_plot = gr.Plot(
                label="patching grid", visible=False, elem_id="why-patch-plot"
            )
            with gr.Row(equal_height=True):
                my.why_cell = gr.Dropdown(
                    label="open one cell: its patched run's next tokens", choices=[], value=None,
                    scale=4, elem_id="why-cell",
                )  # fmt: skip
                my.why_cell_btn = gr.Button("Open the cell", scale=0, elem_id="why-cell-btn")
            my.why_cell_msg = gr.Markdown(elem_id="why-cell-message")
            with gr.Row():
                with gr.Column(scale=2, min_width=260):
                    my.why_cell_table = gr.Dataframe(
                        headers=wr.CELL_HEADERS, interactive=False, visible=False,
                        elem_id="why-cell-table",
                    )  # fmt: skip
                with gr.Column(scale=5):
                    my.why_cell_site = gr.Dropdown(
                        label="attention of the patched run: module and head", choices=[],
                        value=None, elem_id="why-cell-site",
                    )  # fmt: skip
                    my.why_cell_plot = gr.Plot(
                        label="patched run's attention", visible=False, elem_id="why-cell-plot"
                    )
        gr.Markdown("### Information flow")
        with gr.Row(equal_height=True):
            my.why_threshold = gr.Slider(
                0.01, 0.5, value=0.04, step=0.01, label="threshold: edges below are pruned",
                scale=3, elem_id="why-threshold",
            )  # fmt: skip
            my.why_flow_btn = gr.Button("Draw the routes", scale=0, elem_id="why-flow-btn")
            my.why_flow_json = _download("why-flow-json")
        my.why_flow_msg = gr.Markdown(elem_id="why-flow-message")
        my.why_flow_plot = gr.Plot(label="information flow", visible=False, elem_id="why-flow-plot")
        gr.HTML(elem_id="why-edge-hook", js_on_load=EDGE_ON_LOAD, elem_classes="av-hidden")
        my.why_edge_pick = gr.Button("edge", elem_id="why-edge-pick-btn", elem_classes="av-hidden")
        with gr.Row(equal_height=True):
            my.why_edge = gr.Dropdown(
                label="open an attention edge (or click one in the graph): the heads carrying "
                "it", choices=[], value=None, scale=4, elem_id="why-edge",
                allow_custom_value=STALE_OK,  # an edge of a graph since redrawn: one line
            )  # fmt: skip
            my.why_edge_json = _download("why-edge-json")
        my.why_edge_msg = gr.Markdown(elem_id="why-edge-message")
        my.why_edge_table = gr.Dataframe(
            headers=wr.EDGE_HEADERS, interactive=False, visible=False, elem_id="why-edge-table"
        )
        my.why_edge_plot = gr.Plot(label="the edge's heads", visible=False, elem_id="why-edge-plot")
        my.why_kept = gr.State({})  # panel key -> (stamp, result): the grid and graph shown


def _download(elem_id: str):
    return gr.DownloadButton("JSON", visible=False, size="sm", scale=0, elem_id=elem_id)


def panels(p) -> dict[str, list]:
    """Each panel's result components, by stamp key: figure(s), message, JSON download."""
    my = p.part("why")
    return {
        "why_dla": [my.why_dla_plot, my.why_dla_msg, my.why_dla_json],
        "why_lens": [my.why_lens_table, my.why_grid_plot, my.why_lens_msg, my.why_lens_json],
        "why_patch": [
            my.why_patch_plot,
            my.why_cell,
            my.why_cell_table,
            my.why_cell_site,
            my.why_cell_plot,
            my.why_cell_msg,
            my.why_patch_msg,
            my.why_patch_json,
        ],
        "why_flow": [
            my.why_flow_plot,
            my.why_edge,
            my.why_edge_table,
            my.why_edge_plot,
            my.why_edge_json,
            my.why_edge_msg,
            my.why_flow_msg,
            my.why_flow_json,
        ],
    }


def outputs(p) -> list:
    """The tab's components that follow the state (the panels :meth:`Page.follow` clears)."""
    my = p.part("why")
    return [c for cs in panels(p).values() for c in cs] + [my.why_versus]


def follow(p, state, plan) -> dict:
    """The tab's part of following an event (``plan``: :func:`attnviz.app.state.follow`):
    panels computed for another state emptied with the "changed since" note; the menu of
    candidates refilled for the step shown when the tab is shown, else emptied."""
    my = p.part("why")
    out: dict = {}
    for key, comps in panels(p).items():
        if key in plan.clear:
            *figs, msg, json_btn = comps
            out.update({c: _empty(c) for c in figs})
            out.update({msg: STALE, json_btn: gr.DownloadButton(value=None, visible=False)})
    if wv.ALT in plan.rerun:
        out[my.why_versus] = _menu(state)
    elif wv.ALT in plan.clear:
        out[my.why_versus] = gr.Dropdown(choices=[], value=None)
    return out


def _empty(comp):
    if isinstance(comp, gr.DownloadButton):
        return gr.DownloadButton(value=None, visible=False)
    if isinstance(comp, gr.Dataframe):
        return gr.Dataframe(value=None, visible=False)
    if isinstance(comp, gr.Dropdown):
        return gr.Dropdown(choices=[], value=None)
    if isinstance(comp, gr.Markdown):
        return ""
    return shown_plot(None)


def _menu(state, value: str | None = None):
    """The step shown's other candidates; ``value`` kept (a typed token) else empty: the
    attribution explains the token alone until a second one is chosen."""
    choices, _ = wv.candidates(state)
    return gr.Dropdown(choices=choices, value=value)


def _file(view: wv.WhyView, name: str):
    path = wv.write_json(view.data, name)
    return gr.DownloadButton(value=path, visible=path is not None)


def endpoints(p) -> list[tuple]:
    """The tab's buttons, one row each: ``(api name, panel key, view, JSON name, triggers,
    inputs after the state)``."""
    my = p.part("why")
    return [
        ("why_attribution", "why_dla", wv.attribution, "attribution",
         [my.why_dla_btn.click, my.why_versus.input], [my.why_versus]),
        ("why_lens", "why_lens", wv.lens, "logit_lens", [my.why_lens_btn.click], []),
        ("why_grid", "why_lens", wv.grid, "lens_grid", [my.why_grid_btn.click], []),
        ("why_patch", "why_patch", wv.patching, "patching",
         [my.why_patch_btn.click, my.why_corrupted.submit],
         [my.why_corrupted, my.why_answer, my.why_wrong, my.why_what, my.why_direction]),
        ("why_flow", "why_flow", wr.flow_graph, "flow",
         [my.why_flow_btn.click, my.why_threshold.release], [my.why_threshold]),
    ]  # fmt: skip


def _stamped(stamps, state, key):
    return {**stamps, key: stamp(state)[key]}


#: the results kept: patching and flow for their cells and edges, the three for the report
KEPT = ("why_lens", "why_patch", "why_flow")


def _handler(view, key: str, name: str, comps: list):
    """One button's handler: ``view(state, *inputs)`` shown in the panel's components (the
    first table its rows, the first plot its figure themed, the first menu its cells; what
    opens from them emptied), the message, the JSON download; then the panel stamped with
    the state it shows (and, for patching and flow, the result kept with that stamp)."""

    def handle(state, stamps, kept, *args):
        *inputs, theme = args
        v = view(state, *inputs)
        *figs, msg, json_btn = comps
        out, used = [], set()
        for comp in figs:
            kind = type(comp)
            first = kind not in used
            used.add(kind)
            if not first or isinstance(comp, gr.DownloadButton):
                out.append(_empty(comp))
            elif isinstance(comp, gr.Dataframe):
                out.append(gr.Dataframe(value=v.rows or None, visible=bool(v.rows)))
            elif isinstance(comp, gr.Dropdown):
                out.append(gr.Dropdown(choices=v.cells, value=v.cell))
            elif isinstance(comp, gr.Markdown):
                out.append("")
            else:
                out.append(shown_plot(dark([v.figure], theme)[0]))
        now = _stamped(stamps, state, key)
        if key in KEPT:
            kept = {**(kept or {}), key: (now[key], v.result) if v.result is not None else None}
        return (*out, v.message, _file(v, name), now, kept)

    return handle


def wire(p) -> None:
    """The tab's buttons (each one named API endpoint, :func:`endpoints`) and its select (the
    candidates menu filled for the step shown, the tab tracked in ``p.active``)."""
    my = p.part("why")
    for api_name, key, view, name, triggers, inputs in endpoints(p):
        comps = panels(p)[key]
        gr.on(
            triggers, _handler(view, key, name, comps),
            [p.state, p.stamps, my.why_kept, *inputs, p.theme], [*comps, p.stamps, my.why_kept],
            js=THEME_JS, api_name=api_name, **MODEL_EVENTS,
        )  # fmt: skip

    def open_cell(state, corrupted, answer, wrong, what, direction, cell, site, theme):
        v = wr.open_cell(state, corrupted, answer, wrong, what, direction, cell, site)
        return (gr.Dataframe(value=v.rows or None, visible=bool(v.rows)),
                gr.Dropdown(choices=v.cells, value=v.cell),
                shown_plot(dark([v.figure], theme)[0]), v.message)  # fmt: skip

    gr.on(
        [my.why_cell_btn.click, my.why_cell_site.input], open_cell,
        [p.state, my.why_corrupted, my.why_answer, my.why_wrong, my.why_what, my.why_direction,
         my.why_cell, my.why_cell_site, p.theme],
        [my.why_cell_table, my.why_cell_site, my.why_cell_plot, my.why_cell_msg], js=THEME_JS,
        api_name="why_cell", **MODEL_EVENTS,
    )  # fmt: skip

    def open_edge(state, kept, edge, theme):
        v = wr.open_edge(state, (kept or {}).get("why_flow"), edge)
        return (gr.Dropdown(value=str(edge)) if v.rows else gr.Dropdown(),
                gr.Dataframe(value=v.rows or None, visible=bool(v.rows)),
                shown_plot(dark([v.figure], theme)[0]), _file(v, "flow_edge"), v.message)  # fmt: skip

    edge_out = [my.why_edge, my.why_edge_table, my.why_edge_plot, my.why_edge_json, my.why_edge_msg]
    my.why_edge.input(
        open_edge, [p.state, my.why_kept, my.why_edge, p.theme], edge_out, js=THEME_JS,
        api_name="why_edge", **MODEL_EVENTS,
    )  # fmt: skip
    my.why_edge_pick.click(
        open_edge, [p.state, my.why_kept, my.why_edge, p.theme], edge_out, js=EDGE_JS,
        **INTERNAL,
    )  # fmt: skip

    def opened(state, stamps, versus):
        return _menu(state, versus), "why", _stamped(stamps, state, wv.ALT)

    my.why_tab.select(
        opened, [p.state, p.stamps, my.why_versus], [my.why_versus, p.active, p.stamps],
        **HIDDEN, **FAST,
    )  # fmt: skip


def _part(p, name: str, rerun: bool = False):
    """A Why this token panel's part of following, as :func:`follow` gives it."""
    one = frozenset({name})
    none = frozenset()

    def part(state, values):
        plan = Follow(one if rerun else none, none, none if rerun else one, {})
        return follow(p, state, plan)

    return part


def faces(p) -> list[Face]:
    """The Why this token tab's panels on the page."""
    my = p.part("why")
    why = [Face(name, panels(p)[name], clear=_part(p, name)) for name in wv.PANELS]
    alt = Face(wv.ALT, [my.why_versus], clear=_part(p, wv.ALT), rerun=_part(p, wv.ALT, rerun=True))
    return [*why, alt]
