"""Model workers: a checkpoint a user chose runs in a process of its own, never in the server.

An upload (or a folder beyond the shipped models) is opened, and every computation on it runs,
in a worker process started from a ``forkserver`` that has imported attnviz once. Each worker
sets its own address-space limit (``resource.RLIMIT_AS``) before it reads a byte of the model,
and each request has a time limit. A worker that dies (a Rust abort inside ``tokenizers``, a
segfault, the kernel's OOM killer, the limit) or overruns costs its user one line; the server
and every other session keep going.

The boundary is the app's session functions: plain Python, state in, view out. A function
marked :func:`remote` runs here when the state's model is shipped (``models/*``, the shipped
Whisper: Step stays fast) or when no pool is configured (the library, unit tests); otherwise
its name and arguments go to the model's worker, which runs the same function on its own copy
of the model and sends the view back (views pickle: ids, numpy rows, strings).

Workers are kept per model (path, device), at most :attr:`Limits.workers` at once (the least
recently used idle one is ended for a new one), and ended after :attr:`Limits.idle_s` idle.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import multiprocessing
import os
import resource
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ..checkpoint import Checkpoint
from ..core.errors import AttnvizError, InputError, one_line
from .lru import LRU

#: True inside a worker: every :func:`remote` function runs right here.
IN_WORKER = False
#: what the worker module asks of the store (registered by :mod:`attnviz.app.store`, which
#: imports this module): whether a model is shipped, and the store's loader
_STORE: dict[str, Callable] = {
    "is_shipped": lambda path: True,  # no store: every model runs in this process
    "get_checkpoint": lambda path, device: None,
    "model_name": lambda path: str(path).rsplit("/", 1)[-1],
}
#: called in a new worker with its memory limit (bytes), before it serves (the decoders'
#: budget registers here: :mod:`attnviz.app.decoders`)
ON_START: list[Callable[[int], None]] = []


def register_store(is_shipped: Callable, get_checkpoint: Callable, model_name: Callable) -> None:
    """The store's answers this module needs (it may not import the store: the store
    imports it): shipped or not, the loader, a model's menu name (never its path)."""
    _STORE.update(is_shipped=is_shipped, get_checkpoint=get_checkpoint, model_name=model_name)


#: A test-only hook, read when a worker starts: ``"abort:NAME"`` makes the worker
#: ``os.abort()`` on a request whose arguments mention NAME; ``"alloc:NAME"`` makes it allocate
#: until its address-space limit stops it. Unset in use.
CRASH_ENV = "ATTNVIZ_TEST_WORKER_CRASH"
_MEMORY_EXIT = 86  # a worker's exit status after a MemoryError (its state is not trusted)
GB = 1 << 30


class WorkerStopped(AttnvizError):
    """A model's worker died or overran its time, and was stopped (one line for its user)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the workers may take.

    Attributes:
        workers: workers alive at once (each holds one model).
        memory: each worker's address-space limit in bytes (``RLIMIT_AS``).
        timeout_s: the longest one request may take (opening a model included).
        idle_s: a worker unused this long is ended.
        threads: torch threads in each worker.
    """

    workers: int = 2
    memory: int = 3 * GB
    timeout_s: float = 120.0
    idle_s: float = 300.0
    threads: int = 1


def machine_memory() -> int:
    """This machine's RAM in bytes (4 GB when it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 4 * GB


def default_limits(memory: int | None = None, workers: int | None = None) -> Limits:
    """Limits from the app's memory budget (default half the machine's RAM): 3 GB a worker
    (less when the budget is small), as many workers as half the budget holds (1..8); the
    other half is the server's (shipped models, sessions' decoders)."""
    memory = memory or machine_memory() // 2
    per = max(GB, min(3 * GB, memory // 2))
    n = workers or max(1, min(8, (memory // 2) // per))
    return Limits(workers=max(1, n), memory=per)


def stopped_line(code: int | None, limits: Limits, timed_out: bool = False) -> str:
    """The one line a user reads when their model's worker stopped (exit ``code``)."""
    if timed_out:
        return f"this model took more than {limits.timeout_s:.0f} s and was stopped"
    memory = f"this model needed more than {limits.memory / GB:.1f} GB and was stopped"
    if code in (_MEMORY_EXIT, -signal.SIGABRT, -signal.SIGKILL, -signal.SIGSEGV, -signal.SIGBUS):
        return memory  # out of address space: an abort (Rust), a fault, the OOM killer
    return f"this model's worker stopped (exit {code}) and was ended"


# -- the worker process -------------------------------------------------------------------------
def _crash(hook: str, args) -> None:
    """The test-only crash hook (:data:`CRASH_ENV`)."""
    how, _, name = hook.partition(":")
    if not name or name not in repr(args):
        return
    if how == "abort":
        os.abort()
    if how == "alloc":
        held = []
        while True:  # until RLIMIT_AS refuses: MemoryError
            held.append(bytearray(64 << 20))


def _serve(conn, memory: int, threads: int, hook: str) -> None:
    """A worker's loop: ``(module, name, args, kwargs)`` in, ``("ok", result)`` or
    ``("error", kind, line)`` out, until the pipe closes."""
    global IN_WORKER
    IN_WORKER = True
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        for start in ON_START:  # the decoders' budget: a third of this worker's memory
            start(memory)
    torch.set_num_threads(max(1, threads))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        module, name, args, kwargs = request
        try:
            if hook:
                _crash(hook, args)
            out = ("ok", getattr(importlib.import_module(module), name)(*args, **kwargs))
            conn.send(out)
        except MemoryError:
            os._exit(_MEMORY_EXIT)
        except BaseException as exc:  # noqa: BLE001 (sent back; the caller decides)
            kind = "input" if isinstance(exc, AttnvizError) else type(exc).__name__
            conn.send(("error", kind, one_line(exc, 1000)))


class Worker:
    """One worker process holding one model, one request at a time."""

    def __init__(self, key: tuple[str, str], limits: Limits, ctx):
        self.key, self.limits = key, limits
        self.conn, child = ctx.Pipe()
        hook = os.environ.get(CRASH_ENV, "")
        # CUDA maps far more address space than it uses: a GPU worker is bounded by its time
        # limit and the device's own memory, not RLIMIT_AS
        memory = 0 if key[1].startswith("cuda") else limits.memory
        self.proc = ctx.Process(
            target=_serve, args=(child, memory, limits.threads, hook), daemon=True
        )
        self.proc.start()
        child.close()
        self.lock = threading.Lock()
        self.used = time.monotonic()

    def call(self, module: str, name: str, args: tuple, kwargs: dict):
        """Run ``module.name(*args, **kwargs)`` in the worker; its result.

        Raises:
            WorkerStopped: the worker died or overran :attr:`Limits.timeout_s` (it is ended).
            InputError: the function raised an :class:`AttnvizError` (its line).
            RuntimeError: it raised anything else (its type and line).
        """
        with self.lock:
            self.used = time.monotonic()
            try:
                self.conn.send((module, name, args, kwargs))
                if not self.conn.poll(self.limits.timeout_s):
                    self.end()
                    raise WorkerStopped(stopped_line(None, self.limits, timed_out=True))
                reply = self.conn.recv()
            except (EOFError, OSError, BrokenPipeError):
                raise WorkerStopped(stopped_line(self.end(), self.limits)) from None
            finally:
                self.used = time.monotonic()
        if reply[0] == "ok":
            return reply[1]
        _, kind, line = reply
        if kind == "input":
            raise InputError(line)
        raise RuntimeError(f"{kind}: {line}")

    def alive(self) -> bool:
        return self.proc.is_alive()

    def end(self) -> int | None:
        """Stop the process (politely, then by force); its exit status."""
        with _quiet():
            self.conn.close()
        self.proc.join(timeout=2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        return self.proc.exitcode


class _quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)


class Pool:
    """Workers by model, at most ``limits.workers`` alive; idle ones ended by a reaper."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(["attnviz.app.session", "attnviz.app.panels.labs"])
        self._workers = LRU(limits.workers)  # (model path, device) -> its worker
        self._guard = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._reap, name="attnviz-worker-reaper", daemon=True).start()

    def call(self, key: tuple[str, str], module: str, name: str, args: tuple, kwargs: dict):
        """``module.name(*args, **kwargs)`` in the worker of ``key`` (started if needed)."""
        worker = self._get(key)
        try:
            return worker.call(module, name, args, kwargs)
        except WorkerStopped:
            with self._guard:
                if self._workers.get(key) is worker:
                    self._workers.pop(key)
            raise

    def _get(self, key: tuple[str, str]) -> Worker:
        with self._guard:
            w = self._workers.get(key)
            if w is not None and w.alive():
                return w
            self._workers.pop(key, None)
            while len(self._workers) >= self.limits.workers:
                idle = [k for k, x in self._workers.items() if not x.lock.locked()]
                if not idle:
                    raise WorkerStopped(
                        f"all {self.limits.workers} model workers are busy: try again shortly"
                    )
                self._workers.pop(idle[0]).end()  # the least recently used idle one
            w = Worker(key, self.limits, self._ctx)
            for _, dropped in self._workers.put(key, w):  # none: room was made above
                dropped.end()
            return w

    def end(self, path: str | Path) -> None:
        """End the workers of the model at ``path`` (its upload was deleted)."""
        path = str(Path(path).resolve())
        with self._guard:
            gone = [self._workers.pop(k) for k in self._workers.keys() if k[0] == path]
        for w in gone:
            w.end()

    def keys(self) -> list[tuple[str, str]]:
        """The models that have a worker now."""
        with self._guard:
            return self._workers.keys()

    def pids(self) -> list[int]:
        with self._guard:
            return [w.proc.pid for w in self._workers.values()]

    def _reap(self) -> None:
        while not self._closed.wait(min(10.0, self.limits.idle_s / 2)):
            now = time.monotonic()
            with self._guard:
                old = [k for k, w in self._workers.items()
                       if not w.lock.locked() and now - w.used > self.limits.idle_s]  # fmt: skip
                gone = [self._workers.pop(k) for k in old]
            for w in gone:
                w.end()

    def close(self) -> None:
        """End every worker."""
        self._closed.set()
        with self._guard:
            gone = self._workers.clear()
        for w in gone:
            w.end()


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def configure(limits: Limits | None) -> Pool | None:
    """Run chosen models in workers under ``limits`` (None: in this process, as the library
    and unit tests do); the previous pool's workers are ended."""
    global _POOL
    with _POOL_LOCK:
        old, _POOL = _POOL, (Pool(limits) if limits is not None else None)
    if old is not None:
        old.close()
    return _POOL


def pool() -> Pool | None:
    """The pool in use (None: models run in this process)."""
    return _POOL


def remote_path(path: str | Path) -> bool:
    """Whether the model at ``path`` runs in a worker (from this process's point of view)."""
    if _POOL is None or IN_WORKER or not path:
        return False
    return not _STORE["is_shipped"](path)


def remote(
    refused: Callable[..., object] | None = None,
    model_of: Callable[..., str] | None = None,
):
    """Mark a module-level app function whose first argument is a session state to run in the
    worker of the state's model when that model is not shipped.

    Args:
        refused: ``refused(*args, message=line, **kwargs)``: what to return when the worker
            stops (default: raise :class:`WorkerStopped`).
        model_of: the model a call acts on (default ``args[0].model``; ``choose_model``: the
            model it switches to).
    """

    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            state = args[0] if args else kwargs.get("state")
            model = model_of(*args, **kwargs) if model_of else getattr(state, "model", "")
            if not remote_path(model):
                return fn(*args, **kwargs)
            key = (str(Path(model).resolve()), getattr(state, "device", "cpu"))
            try:
                return _POOL.call(key, fn.__module__, fn.__name__, args, kwargs)
            except WorkerStopped as exc:
                if refused is None:
                    raise
                line = f"{_STORE['model_name'](model)}: {exc}"
                return refused(*args, message=f"⚠ {line}", **kwargs)

        return call

    return wrap


# -- what the server keeps of a worker's model -------------------------------------------------
@dataclasses.dataclass
class Facade(Checkpoint):
    """What the server holds of a model that runs in a worker: its config, metadata and
    decode settings, no weights and no tokenizer (page controls, menus and headers read it;
    anything that would compute is refused in one line)."""

    where: str = "cpu"

    @property
    def device(self) -> torch.device:
        return torch.device(self.where)

    def encode_source(self, text: str):
        raise InputError("this model runs in its own worker: ask it through the session")


def facts(path: str, device: str) -> Facade:
    """Run in the worker: open the model at ``path`` and describe it for the server."""
    ckpt = _STORE["get_checkpoint"](path, device)
    return Facade(
        model=None, src_tokenizer=None, tgt_tokenizer=None, config=ckpt.config,
        meta=ckpt.meta, path=ckpt.path, rules=ckpt.rules, max_new_tokens=ckpt.max_new_tokens,
        prompt=ckpt.prompt, where=str(ckpt.device),
    )  # fmt: skip


def facade(path: str | Path, device: str) -> Facade:
    """The server's :class:`Facade` of the worker model at ``path`` (opened in its worker).

    Raises:
        WorkerStopped: the worker died opening it; AttnvizError: it does not load.
    """
    key = (str(Path(path).resolve()), device)
    return _POOL.call(key, __name__, "facts", (key[0], device), {})
