"""What each of the page's panels depends on (its stamp), and what a panel computed for an
earlier state does when an event makes another state current: rerun, renew or clear.

No gradio and no files: pure functions of the session state, used by the page's wiring
(:mod:`attnviz.app.ui`) and by the panels that stamp their results.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .state import SessionState


def panel_stamps(state: SessionState) -> dict[str, Any]:
    """What each of the page's other panels depends on, by panel: a panel computed for a
    stamp other than the current one shows an earlier state (the page clears or reruns it).

    ``mask``, ``attr``, ``attr_vs``, ``attr_alt``, ``export``, ``faith``, ``whatif`` follow the
    shown step;
    ``beam``, ``ablate`` and ``align`` the input (``health`` too, where a checkpoint
    without a task was checked on it); ``model`` the checkpoint file's version as
    the last action read it (``state.version``: the header, health, playback range); ``reference`` (the Reference box's scored strip) the
    input, the checkpoint file and the output the step view shows (its mark of where the
    reference leaves that output).
    """
    decode = (state.model, state.epoch, state.step)
    version = state.version  # the checkpoint file's, as the last action read it
    return {
        "mask": decode,
        "attr": decode,
        "attr_vs": decode,  # "why this token and not that one": stamped on its own run
        "export": decode,
        "faith": decode,
        "whatif": decode,  # the step view's what-if panel: its strip shades the step shown
        "attr_alt": decode,  # the Attribution tab's alternatives: the shown step's candidates
        "reference": (state.model, state.epoch, version, tuple(state.tokens[: state.step])),
        "beam": (state.model, state.epoch),
        "ablate": (state.model, state.epoch),
        "align": (state.model, state.epoch),
        "compare": (state.model, state.epoch),  # the Compare tab's result: A and the input
        "similarity": (state.model, version),  # the Similarity tab: its own sentences
        # the Why this token tab's panels and its menu of the step's candidates
        **dict.fromkeys(("why_dla", "why_lens", "why_patch", "why_flow", "why_alt"), decode),
        "model": (state.model, version),
        # a checkpoint without a task is checked on the current input (stamped only then)
        "health": (state.model, version, state.epoch),
    }


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
    """
    stale = stale_panels(stamps, state)
    now = panel_stamps(state)
    rerun = stale & ({"mask"} if active == "mask" else set())
    if active == "step" and "whatif" in opened:
        rerun |= stale & {"whatif"}
    if active == "attr":  # the menu is cheap (the shown step's probabilities): it follows
        rerun |= stale & {"attr_alt"}
    if active == "why":  # the Why this token tab's candidates menu likewise
        rerun |= stale & {"why_alt"}
    if "reference" in stale and stamps["reference"][:3] == now["reference"][:3]:
        rerun.add("reference")  # same input and file: rescore, the mark follows the output
    renew = stale & {"model"}
    keep = {k: v for k, v in stamps.items() if k not in stale}
    keep.update({k: now[k] for k in rerun | renew})
    return Follow(frozenset(rerun), frozenset(renew), frozenset(stale - rerun - renew), keep)
