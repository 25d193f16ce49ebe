"""What each of the page's panels depends on (its stamp), and what a panel computed for an
earlier state does when an event makes another state current: rerun, renew or clear.

No gradio and no files: pure functions of the session state, used by the page's wiring
(:mod:`attnviz.app.ui`) and by the panels that stamp their results.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .panels import BY_NAME, PANELS
from .state import SessionState


def panel_stamps(state: SessionState) -> dict[str, Any]:
    """What each of the page's other panels depends on, by panel (every panel of
    :data:`attnviz.app.panels.PANELS`, by its stamp): a panel computed for a stamp other than
    the current one shows an earlier state (the page clears or reruns it)."""
    return {panel.name: tuple(getattr(state, f) for f in panel.stamp) for panel in PANELS}


def stale_panels(stamps: dict[str, Any], state: SessionState) -> set[str]:
    """The panels whose stamp (the state they were computed for, by panel, as
    :func:`panel_stamps` gives it) is not the current state's: they show an earlier state."""
    now = panel_stamps(state)
    return {k for k, v in stamps.items() if v != now.get(k)}


@dataclasses.dataclass(frozen=True)
class Follow:
    """How the page's other panels follow an event (see :func:`follow`).

    Attributes:
        rerun: panels computed again now, for the current state (the mask lab when it is
            the tab shown: a person watching it sees it follow every step; the Attribution
            tab's alternatives menu when that tab is shown; the Reference box when only the
            output shown moved, same input and checkpoint file).
        renew: panels that follow the checkpoint (``"model"``: the header, the playback
            range and the health report) and are renewed from the current state.
        clear: every other stale panel: emptied and marked as computed for an earlier state
            (computing labs the person is not looking at would make every Step wait).
        stamps: the stamps after following: the current ones for ``rerun`` and ``renew``,
            none for ``clear``ed panels, unchanged for the rest.
    """

    rerun: frozenset[str]
    renew: frozenset[str]
    clear: frozenset[str]
    stamps: dict[str, Any]

    def __bool__(self) -> bool:
        return bool(self.rerun or self.renew or self.clear)


def follow(
    stamps: dict[str, Any], state: SessionState, active: str, opened: frozenset[str] = frozenset()
) -> Follow:
    """What each panel computed for another state does now that ``state`` is current.

    Args:
        stamps: what the panels show (:func:`panel_stamps` of the states they were computed
            for, by panel); panels never computed have no stamp and nothing to follow.
        active: the tab shown (``"step"``, ``"mask"``, ``"align"``, ...).
        opened: collapsible panels open on their tab (``"whatif"``: the step view's what-if
            panel follows each step while it is open and its tab shown).

    Each panel's rule is its registration's (:meth:`attnviz.app.panels.registry.Panel.reruns`).
    """
    stale = stale_panels(stamps, state)
    now = panel_stamps(state)
    rerun = {
        k for k in stale
        if k in BY_NAME and not BY_NAME[k].renew
        and BY_NAME[k].reruns(stamps[k], now[k], active, opened)
    }  # fmt: skip
    renew = {k for k in stale if k in BY_NAME and BY_NAME[k].renew}
    keep = {k: v for k, v in stamps.items() if k not in stale}
    keep.update({k: now[k] for k in rerun | renew})
    return Follow(frozenset(rerun), frozenset(renew), frozenset(stale - rerun - renew), keep)
