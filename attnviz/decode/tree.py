"""The tree beam search keeps and its results: :class:`BeamNode`, :class:`BeamTree`,
:class:`Hypothesis`, :class:`BeamResult` (the search itself is :mod:`attnviz.decode.beam`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..core.errors import InputError
from ..core.record import Trace


@dataclass(frozen=True)
class BeamNode:
    """One hypothesis prefix in the search tree.

    Attributes:
        id: index in :attr:`BeamTree.nodes` (node 0 is the start token).
        parent: the id of the prefix this extends (None for the start token).
        token: the token this node adds.
        step: index of ``token`` among the produced tokens (0 = first after the start
            token; -1 for the start token itself).
        logp: the log-probability the search added for ``token``, after the generation rules
            (a forced token adds 0).
        score: sum of ``logp`` from the start token to here.
        finished: the hypothesis ended here (EOS, or the length limit) and joined the
            finished hypotheses.
    """

    id: int
    parent: int | None
    token: int
    step: int
    logp: float
    score: float
    finished: bool


@dataclass
class BeamTree:
    """Every extension beam search kept, step by step.

    Attributes:
        nodes: :class:`BeamNode` list, parents before children, ``nodes[i].id == i``.
        best: id of the winning hypothesis's last node.
    """

    nodes: list[BeamNode]
    best: int

    def path(self, node_id: int) -> list[BeamNode]:
        """The nodes from the first produced token to ``node_id`` (start token excluded)."""
        if not 0 <= node_id < len(self.nodes):
            raise InputError(f"node must be in 0..{len(self.nodes) - 1}, got {node_id}")
        out = []
        node: BeamNode | None = self.nodes[node_id]
        while node is not None and node.parent is not None:
            out.append(node)
            node = self.nodes[node.parent]
        return out[::-1]

    def tokens(self, node_id: int) -> list[int]:
        """Token ids of the hypothesis ending at ``node_id`` (start token excluded)."""
        return [n.token for n in self.path(node_id)]

    def finished(self) -> list[BeamNode]:
        """Nodes where a hypothesis ended, in the order they ended."""
        return [n for n in self.nodes if n.finished]

    def to_dict(self) -> dict:
        """JSON-ready: ``{"best": id, "nodes": [{id, parent, token, step, logp, ...}]}``."""
        return {"best": self.best, "nodes": [dataclasses.asdict(n) for n in self.nodes]}


@dataclass(frozen=True)
class Hypothesis:
    """A finished hypothesis: ``tokens`` (start token excluded), ``score`` (sum of log-probs),
    ``normalized_score`` (``score / len(tokens) ** length_penalty``), its tree ``node``."""

    tokens: list[int]
    score: float
    normalized_score: float
    node: int | None = None


@dataclass
class BeamResult:
    """Best hypothesis of a beam search.

    Attributes:
        tokens: ids without BOS (ending with EOS unless cut at ``max_len``).
        score: sum of log-probabilities of ``tokens`` (after the generation rules).
        normalized_score: ``score / len(tokens) ** length_penalty`` (what ranks hypotheses).
        trace: attention the model used for this hypothesis (``return_attention=True``).
        tree: the search tree (``return_tree=True``).
        hypotheses: the finished hypotheses at the end, best first (the winner first; at
            most ``beam_size``), as transformers' ``num_return_sequences`` would give them.
    """

    tokens: list[int]
    score: float
    normalized_score: float
    trace: Trace | None = None
    tree: BeamTree | None = None
    hypotheses: list[Hypothesis] = field(default_factory=list)
