"""The server-side decoders of the app: one :class:`~attnviz.GreedyStepper` per session.

A session's state holds token ids, never a model; its stepper (KV cache, recorded rows) lives
here, keyed by the session id, each behind the session's own lock so two users never wait for
each other and one user's two events never interleave. A stepper that is missing or stale
(evicted, a new input, a rewritten checkpoint) is rebuilt by forcing the state's tokens
(:meth:`~attnviz.GreedyStepper.sync`), with the same attention: eval mode is deterministic.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.gemv import Copies
from ..data.audio import log_mel
from ..decode.greedy import GreedyStepper
from .lru import LRU
from .recall import encode_keeping_inputs
from .state import SessionState

MAX_STEPPERS = 64
#: What the app's steppers record: the views draw weights and masks, never the raw scores
#: (at 1,024 source tokens the encoder's scores alone would be 200 MB on opus-mt's shape).
APP_CAPTURE = ("mask", "weights", "window")
#: Model work running at once, all sessions together: more only makes each wait longer on a
#: small CPU (threads preempt each other) while the total work stays the same.
COMPUTE_SLOTS = 2


def held_bytes(obj, seen: set | None = None, depth: int = 0) -> int:
    """Bytes of the tensors and arrays ``obj`` holds (its recorded rows, KV cache, encoder
    trace; each storage counted once), not counting the model or its weight copies."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        key = (obj.untyped_storage().data_ptr(), obj.device.type)
        if key in seen or obj.device.type == "meta":
            return 0
        seen.add(key)
        return obj.untyped_storage().nbytes()
    if isinstance(obj, np.ndarray):
        base = obj.base if obj.base is not None else obj
        if id(base) in seen:
            return 0
        seen.add(id(base))
        return int(getattr(base, "nbytes", obj.nbytes))
    if depth > 8 or isinstance(obj, (str, bytes, int, float, bool, type(None), torch.nn.Module)):
        return 0
    if isinstance(obj, dict):
        items = obj.values()
    elif isinstance(obj, (list, tuple, set)):
        items = obj
    elif hasattr(obj, "__dict__") or hasattr(obj, "__slots__"):
        names = getattr(obj, "__dict__", None) or {
            n: getattr(obj, n, None) for n in getattr(obj, "__slots__", ())
        }
        items = [v for k, v in names.items() if k not in ("model", "copies", "rules")]
    else:
        return 0
    return sum(held_bytes(v, seen, depth + 1) for v in items)


class DecoderCache:
    """Per-session steppers, bounded in number and in bytes (least recently used dropped:
    it is rebuilt from the state's tokens when its session comes back), one lock per session,
    and at most ``slots`` sessions computing at once.

    Attributes:
        budget: bytes all steppers together may hold (their recorded rows, caches, encoder
            traces, measured by :func:`held_bytes` after each use); None for no bound.
    """

    def __init__(
        self, maxsize: int = MAX_STEPPERS, slots: int = COMPUTE_SLOTS, budget: int | None = None
    ):
        self.budget = budget
        self._sizes: dict[str, int] = {}
        self._slots = threading.BoundedSemaphore(slots)
        self._items = LRU(maxsize)  # sid -> (signature, stepper)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()  # guards the two dicts, held for microseconds

    @property
    def maxsize(self) -> int:
        """Steppers kept at most (the least recently used pushed out)."""
        return self._items.maxsize

    @maxsize.setter
    def maxsize(self, n: int) -> None:
        self._items.maxsize = n

    def _lock(self, sid: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(sid, threading.Lock())

    @contextlib.contextmanager
    def hold(self, state: SessionState, ckpt: Checkpoint, version: int) -> Iterator[GreedyStepper]:
        """This session's stepper holding exactly ``state.tokens``, locked for the block.

        Args:
            state: a started state (``sid`` and ``src_ids`` set).
            ckpt: its checkpoint; version: the checkpoint file's version (a new one rebuilds).
        """
        sig = (state.model, version, state.device, tuple(state.src_ids), state.audio)
        with self._lock(state.sid), self._slots:
            with self._guard:
                hit = self._items.get(state.sid)
            if hit is not None and hit[0] == sig:
                stepper = hit[1]
            else:
                stepper = new_stepper(state, ckpt)
                with self._guard:
                    for old, _ in self._items.put(state.sid, (sig, stepper)):
                        self._sizes.pop(old, None)
                        if old != state.sid:
                            self._locks.pop(old, None)
            stepper.sync(state.tokens)
            try:
                yield stepper
            finally:
                release = getattr(stepper.encoder_trace, "release", None)
                if release is not None:  # a recalled encoder's layer shown by this request
                    release()
                if self.budget is not None:
                    self._fit(state.sid, held_bytes(stepper))

    def _fit(self, sid: str, size: int) -> None:
        """Record ``sid``'s stepper size; drop the least recently used others (never one in
        use) until the steppers fit the budget."""
        with self._guard:
            if sid in self._items:
                self._sizes[sid] = size
            total = sum(self._sizes.values())
            for old in self._items.keys():
                if total <= self.budget:
                    break
                lock = self._locks.get(old)
                if old == sid or (lock is not None and lock.locked()):
                    continue
                self._items.pop(old)
                total -= self._sizes.pop(old, 0)

    def held(self) -> int:
        """Bytes the steppers held when last measured (0 without a budget)."""
        with self._guard:
            return sum(self._sizes.values())

    def forget(self, sid: str) -> None:
        """Free a session's stepper (its state expired or the tab closed)."""
        with self._guard:
            self._items.pop(sid, None)
            self._locks.pop(sid, None)
            self._sizes.pop(sid, None)

    def sessions(self) -> set[str]:
        """Ids of the sessions holding a stepper now."""
        with self._guard:
            return set(self._items.keys())

    def __len__(self) -> int:
        with self._guard:
            return len(self._items)


#: Models whose weight copies are kept (each up to :data:`attnviz.core.gemv.BUDGET` elements).
KEPT_COPIES = 2
_COPIES = LRU(KEPT_COPIES)  # id(model) -> (model, its copies)


def copies_of(ckpt: Checkpoint) -> Copies | None:
    """Column-major copies of the checkpoint's decoder weights (:mod:`attnviz.core.gemv`),
    made on its first stepper and kept for the :data:`KEPT_COPIES` models used last. Safe to
    keep: the app loads checkpoints read-only, so their weights never change while held (a
    rewritten file is a new checkpoint, hence new copies). None for a model without a decoder."""
    model = ckpt.model
    if model.decoder is None:
        return None
    hit = _COPIES.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    copies = Copies(model)  # outside any lock: other sessions' steps go on meanwhile
    _COPIES.put(id(model), (model, copies))
    return copies


def new_stepper(state: SessionState, ckpt: Checkpoint) -> GreedyStepper:
    """A stepper on the state's own source ids (``[Ts]``, encoded once when the input was
    started: never re-encoded from the text), with the checkpoint's special ids and
    generation rules, as its ``predict()`` uses them.

    A speech model's stepper holds the clip's log-mel features ``[1, n_mels, 3000]`` (its
    ``src``: the one log-mel of the clip) and a :class:`~attnviz.app.recall.RecalledEncoder`
    (each encoder layer's input and the encoder's output, not the 1,500 x 1,500 weights:
    a layer's weights are recomputed when the page shows it)."""
    cfg = ckpt.config
    if state.audio:  # a speech model: the clip's log-mel features [n_mels, 3000]
        samples = np.load(state.audio, allow_pickle=False)  # kept by attnviz.app.speech
        src = log_mel(samples, cfg.n_mels).to(ckpt.device)
    else:
        src = torch.tensor(state.src_ids, dtype=torch.long, device=ckpt.device)

    def build(capture) -> GreedyStepper:
        return GreedyStepper(
            ckpt.model,
            src,
            cfg.bos_id,
            cfg.eos_id,
            max_len=state.max_steps or ckpt.max_new_tokens,
            rules=ckpt.rules,
            capture=capture,
            copies=copies_of(ckpt),
        )

    if state.audio:
        return encode_keeping_inputs(build, ckpt.model, APP_CAPTURE)
    return build(APP_CAPTURE)


#: The process's decoders (the app's sessions share the process's models).
DECODERS = DecoderCache()
