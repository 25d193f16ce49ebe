"""The attnviz web app: a Gradio attention inspector over the library.

- :mod:`~attnviz.app.session`: per-user actions (start, step, run, back, reset, ...), plain
  Python returning :class:`~attnviz.app.state.DecodeView`; no gradio.
- :mod:`~attnviz.app.state`, :mod:`~attnviz.app.views`: the deep-copyable per-user state and
  what the page shows for it.
- :mod:`~attnviz.app.labs`, :mod:`~attnviz.app.panels`: mask lab, head ablation, attribution,
  checkpoint health, training playback, export.
- :mod:`~attnviz.app.models`: checkpoints loaded once per process and shared; upload checks.
- :mod:`~attnviz.app.ui`: the Gradio layout and wiring (the only module importing gradio);
  ``attnviz app`` runs :func:`attnviz.app.ui.main`.

Importing this package does not import gradio.
"""
