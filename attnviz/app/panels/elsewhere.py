"""The faces of the panels still laid out outside this folder by modules edited elsewhere
(to move here): the Why this token tab's panels (:mod:`attnviz.app.ui_why`).

Built after layout, from those modules' components and their public :func:`ui_why.follow`.
"""

from __future__ import annotations

from .. import ui_why, why_view
from ..stamps import Follow
from .registry import Face


def _why(p, name: str, rerun: bool = False):
    """A Why this token panel's part of following, as :func:`ui_why.follow` gives it."""
    one = frozenset({name})
    none = frozenset()

    def part(state, values):
        plan = Follow(one if rerun else none, none, none if rerun else one, {})
        return ui_why.follow(p, state, plan)

    return part


def faces(p) -> list[Face]:
    """The Why this token tab's panels on the page."""
    why = [
        Face(name, ui_why.panels(p)[name], clear=_why(p, name))
        for name in why_view.PANELS
    ]  # fmt: skip
    return [
        *why,
        Face(
            why_view.ALT,
            [p.why_versus],
            clear=_why(p, why_view.ALT),
            rerun=_why(p, why_view.ALT, rerun=True),
        ),
    ]
