"""The attnviz web app: a Gradio attention inspector over the library.

A Step click goes ui -> session -> views -> the page, one way:

- :mod:`~attnviz.app.session`: per-user actions (start, step, run, back, reset, goto, ...),
  plain Python returning :class:`~attnviz.app.session.DecodeView`; one per-session lock and one
  decoder sync per action; no gradio.
- :mod:`~attnviz.app.inputs`: the session's one input object (text, a sentence or pair for an
  encoder-only model, a clip): its start state, labels and source.
- :mod:`~attnviz.app.decoders`: the server-side decoders (one ``GreedyStepper`` per session)
  behind :class:`~attnviz.app.decoders.DecoderCache`; :mod:`~attnviz.app.lru`: the app's one
  least-recently-used map, a leaf every module of the app may import.
- :mod:`~attnviz.app.state`: the small, deep-copyable per-user state.
- :mod:`~attnviz.app.views`: pure functions of state + trace: the status line and the
  payload the page draws from (only the rows it lacks); the same views as plotly figures.
- :mod:`~attnviz.app.panels`: the page's panels, registered (one table, ``PANELS``, of what
  each follows), one module per panel named for it: ``beam``, ``whatif``, ``reference``
  (the step view's), ``compare``, ``similarity``, ``health``, ``playback``, ``export``,
  ``alignment``, ``why``, ``labs`` (the mask lab, head ablation and attribution), each tab
  laid out and wired by its ``*_ui`` module (or the panel's own, where it fits in one).
- :mod:`~attnviz.app.speech`: a speech model's clip as the input and the speech part of the
  payload.
- :mod:`~attnviz.app.store`: checkpoints loaded once per process and shared; upload checks;
  the model menu's names (another session's upload never among them:
  :mod:`~attnviz.app.uploads`); :mod:`~attnviz.app.workers`: chosen models run in worker
  processes with their own memory limit.
- :mod:`~attnviz.app.ui`: the Gradio page assembled (:func:`~attnviz.app.ui.build_app`), laid
  out and wired by one module per tab: :mod:`~attnviz.app.ui_step` (the top and the
  Step-through tab) and the panel modules that lay out the other tabs, in the registry's
  order (:func:`~attnviz.app.ui.panel_pages`), with :mod:`~attnviz.app.ui_common`
  (what they share); gradio is imported only there. ``assets/viz.js`` draws the heatmaps in the
  page.
- :mod:`~attnviz.app.server`: ``attnviz app`` (:func:`attnviz.app.server.main`) and the
  launch options; :mod:`attnviz.bench.app`: the app's rows of ``attnviz bench``.

Importing this package does not import gradio.
"""
