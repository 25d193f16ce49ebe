"""What a panel registers, and the stamps it may depend on: no gradio, no app imports.

A :class:`Panel` is the facts the page needs to keep a panel in step with the session state
(its name, its tab, its stamp, whether it reruns when its tab is in view); a :class:`Face` is
the panel on the page (its components, how it is cleared, rerun and renewed when the model
changes), built by the module that lays it out. :meth:`attnviz.app.ui.Page.follow`,
``lab_outputs``, ``control_outputs`` and :func:`attnviz.app.state.panel_stamps` loop over
them; none of them names a panel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

#: The session state (:class:`attnviz.app.state.SessionState`, which asks this registry for the
#: panels' stamps: named here by its role, so this module stays a leaf).
SessionState = Any

#: A stamp: what a panel's result depends on, as the :class:`SessionState` fields it reads
#: (data, not code: the stamps are read on every Step).
Stamp = tuple[str, ...]
#: The step shown: the model, the decode (``epoch``) and the step.
ON_STEP: Stamp = ("model", "epoch", "step")
#: The input: the model and the decode, whatever step is shown.
ON_INPUT: Stamp = ("model", "epoch")
#: The checkpoint file as the last action read it (``state.version``).
ON_FILE: Stamp = ("model", "version")
#: The checkpoint file and the input (a checkpoint without a task is checked on it).
ON_CHECKED_INPUT: Stamp = ("model", "version", "epoch")
#: The input, the checkpoint file and the output shown (``state.shown``: its first tokens).
ON_OUTPUT: Stamp = ("model", "epoch", "version", "shown")


def same_source(old: Any, new: Any) -> bool:
    """Two :data:`ON_OUTPUT` stamps of one input and file (only the output shown moved)."""
    return old[:3] == new[:3]


@dataclasses.dataclass(frozen=True)
class Panel:
    """One panel of the page, as the state's followers see it.

    Attributes:
        name: its stamp key (the page's ``stamps`` hold ``{name: stamp of the state shown}``).
        tab: the tab it is on (``"step"``, ``"mask"``, ``"attr"``, ...; ``""``: the header).
        stamp: what its result depends on (:data:`ON_STEP`, :data:`ON_INPUT`, ...).
        in_view: rerun (not cleared) when it is stale and its tab is shown; a panel whose
            rerun costs a model pass and is cheap to ask again says False.
        opened: a collapsible part it lives in: it reruns in view only while that is open.
        rerun_when: ``(old stamp, new stamp) -> bool``: rerun whatever the tab shown (the
            Reference box when only the output shown moved).
        renew: it follows the checkpoint file (the header): renewed, never cleared.
        page: the module of this folder that lays it out, wires it and builds its face
            (its ``layout(p)``, ``wire(p)``, ``faces(p)``), its tab added after the labs' tabs;
            ``""``: laid out by a ``ui_*`` module of the app.
    """

    name: str
    tab: str
    stamp: Stamp
    in_view: bool = False
    opened: str = ""
    rerun_when: Callable[[Any, Any], bool] | None = None
    renew: bool = False
    page: str = ""

    def reruns(self, old: Any, new: Any, active: str, opened: frozenset[str]) -> bool:
        """Whether this panel, stale (stamped ``old``, the state now ``new``), is computed
        again now rather than cleared (``active``: the tab shown; ``opened``: open parts)."""
        if self.rerun_when is not None and self.rerun_when(old, new):
            return True
        shown = self.in_view and active == self.tab
        return shown and (not self.opened or self.opened in opened)


#: What a face's hooks return: component -> value (or a gradio update) for the page.
Updates = dict
#: The values of the components a face reads, by component (gradio's dict of inputs).
Values = dict


@dataclasses.dataclass(frozen=True)
class Face:
    """A registered panel on the page: built by the module that lays it out, after layout.

    Attributes:
        name: the :class:`Panel` it shows (``"model"``: the header and what follows it).
        outputs: the components it sets when the state moves on.
        clear: ``(state, values) -> updates``: emptied, marked as computed for an earlier
            state (:data:`attnviz.app.pagetext.STALE`).
        rerun: ``(state, values) -> updates``: computed again for ``state`` (a panel that
            reruns in view, or is renewed).
        inputs: the components whose values ``clear``/``rerun`` read (``values[component]``).
        opened: a component whose value says the panel's collapsible part is open.
        controls: ``(state, ckpt) -> updates``: its menus and labels for the loaded model.
        control_outputs: the components ``controls`` sets.
    """

    name: str
    outputs: Sequence = ()
    clear: Callable[[SessionState, Values], Updates] | None = None
    rerun: Callable[[SessionState, Values], Updates] | None = None
    inputs: Sequence = ()
    opened: Any = None
    controls: Callable[[SessionState, Any], Updates] | None = None
    control_outputs: Sequence = ()
