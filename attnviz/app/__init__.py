"""The attnviz web app: a Gradio attention inspector over the library.

A Step click goes ui -> session -> views -> the page, one way:

- :mod:`~attnviz.app.session`: per-user actions (start, step, run, back, reset, goto, ...),
  plain Python returning :class:`~attnviz.app.session.DecodeView`; one per-session lock and one
  decoder sync per action; no gradio.
- :mod:`~attnviz.app.decoders`: the server-side decoders (one ``GreedyStepper`` per session)
  behind :class:`~attnviz.app.decoders.DecoderCache`.
- :mod:`~attnviz.app.state`: the small, deep-copyable per-user state.
- :mod:`~attnviz.app.views`: pure functions of state + trace: the status line and the
  payload the page draws from (only the rows it lacks); the same views as plotly figures.
- :mod:`~attnviz.app.labs`, :mod:`~attnviz.app.panels`: mask lab, head ablation, attribution,
  checkpoint health, training playback, export (and "why this token and not that one").
- :mod:`~attnviz.app.whatif_view`: the step view's what-if panel (a source token clicked:
  the chosen heads attend only to it at the step shown, the output re-decoded).
- :mod:`~attnviz.app.store`: checkpoints loaded once per process and shared; upload checks;
  the model menu's names.
- :mod:`~attnviz.app.ui`: the Gradio page assembled (:func:`~attnviz.app.ui.build_app`), laid
  out and wired by one module per tab or panel group: :mod:`~attnviz.app.ui_step` (the top
  and the Step-through tab), :mod:`~attnviz.app.ui_labs`, :mod:`~attnviz.app.ui_align`,
  :mod:`~attnviz.app.ui_compare` (and :mod:`~attnviz.app.ui_common`, what they share); the
  only modules importing gradio. ``assets/viz.js`` draws the heatmaps in the page.
- :mod:`~attnviz.app.server`: ``attnviz app`` (:func:`attnviz.app.server.main`) and the
  launch options; :mod:`~attnviz.app.bench`: the app's rows of ``attnviz bench``.

Importing this package does not import gradio.
"""
