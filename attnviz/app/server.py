"""The app's server: ``attnviz app`` (:func:`main`) and the options every launch shares.

No gradio import here: the page itself is :func:`attnviz.app.ui.build_app`, imported when
the server starts; :func:`launch_kwargs` are the arguments of its ``launch`` (the tests and
the browser benchmark launch the page with the same ones).
"""

from __future__ import annotations

import argparse
import sys

import torch

from ..core.errors import AttnvizError
from . import store, uploads, workers
from .decoders import DECODERS
from .filekinds import MAX_UPLOAD, upload_bytes
from .session import APP_THREADS

CSS_FILE = store.ASSETS_DIR / "app.css"
MAX_FILE_SIZE = MAX_UPLOAD  # an upload's cap (gradio's own, 200 MB, fits no real model)
MAX_SESSIONS = 1000  # sessions gradio keeps in memory at most (oldest dropped; default 10000)
QUEUE_CONCURRENCY = 2  # queued events (labs, model loads) running at once
SHARE_WARNING = (
    "attnviz app: WARNING: --share makes this app PUBLIC on the internet through a "
    "gradio.live link for as long as it runs: anyone with the link can use it, run the "
    "model on this machine and upload files to it. Stop it with Ctrl+C."
)


def launch_kwargs(
    host: str = "127.0.0.1",
    port: int | None = 7860,
    share: bool = False,
    max_upload: str | int = MAX_FILE_SIZE,
) -> dict:
    """Arguments of ``demo.launch`` shared by :func:`main` and the tests.

    Binds ``host`` only (default loopback: this machine alone); gradio serves no file outside
    its own cache and the files the app returns (nothing in ``allowed_paths``); an upload
    larger than ``max_upload`` (:func:`upload_bytes`) is refused.
    """
    css = CSS_FILE.read_text() if CSS_FILE.is_file() else None
    return dict(
        server_name=host,
        server_port=port,
        share=share,
        max_file_size=upload_bytes(max_upload),
        state_session_capacity=MAX_SESSIONS,
        css=css,
        theme="soft",  # gradio's built-in Soft theme, by name
        show_error=True,
        # no run history: it would copy every event's outputs (the heatmap rows) into the
        # browser's localStorage, ~100 ms per click on a large model, and keep inputs there
        run_history=False,
    )


def exposure_warnings(host: str, share: bool) -> list[str]:
    """Warnings to print before launching when the app is reachable beyond this machine."""
    out = [SHARE_WARNING] if share else []
    if host not in ("127.0.0.1", "localhost", "::1"):
        out.append(
            f"attnviz app: WARNING: binding {host}: the app is reachable from other machines "
            "on your network(s), without a password."
        )
    return out


def parser() -> argparse.ArgumentParser:
    """The options of ``attnviz app``."""
    ap = argparse.ArgumentParser(prog="attnviz app", description="the attention inspector")
    ap.add_argument("--model", help="checkpoint folder (default: the first under models/)")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=7860)
    ap.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda")
    ap.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    ap.add_argument(
        "--threads", type=int, default=APP_THREADS,
        help=f"torch threads per request (default {APP_THREADS}: requests run side by side)",
    )  # fmt: skip
    ap.add_argument("--no-browser", action="store_true", help="do not open a browser tab")
    ap.add_argument(
        "--max-upload", type=_size_arg, default=MAX_FILE_SIZE, metavar="SIZE",
        help=f"largest file the page takes (default {MAX_FILE_SIZE}; e.g. 500mb, 8gb); "
        "a model larger than that: pass --model PATH",
    )  # fmt: skip
    ap.add_argument(
        "--memory", type=_size_arg, default=None, metavar="SIZE",
        help="memory the app may use in all (default half this machine's RAM): half of it for "
        "model workers, the rest for the shipped models and sessions' decoders",
    )  # fmt: skip
    ap.add_argument(
        "--workers", type=int, default=None, metavar="N",
        help="uploaded or chosen models running at once, each in its own process "
        "(default: as many as the memory budget holds, 1..8)",
    )  # fmt: skip
    ap.add_argument(
        "--upload-disk", type=_size_arg, default="2gb", metavar="SIZE",
        help="disk all uploads together may take (default 2gb); deleted when a session ends",
    )  # fmt: skip
    return ap


def configure_limits(memory: str | None, n_workers: int | None, upload_disk: str) -> None:
    """Run chosen models in workers and bound what the sessions keep (``--memory``,
    ``--workers``, ``--upload-disk``)."""
    budget = upload_bytes(memory) if memory else None
    limits = workers.default_limits(budget, n_workers)
    workers.configure(limits)
    total = budget or workers.machine_memory() // 2
    DECODERS.budget = max(64 << 20, total // 4)  # the server's steppers: recorded rows
    uploads.set_disk_budget(upload_bytes(upload_disk))


def _size_arg(text: str) -> str:
    try:
        upload_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def main(argv: list[str] | None = None) -> int:
    """``attnviz app [--model PATH] [--host H] [--port P] [--device D] [--share] [--threads N]
    [--no-browser] [--max-upload SIZE] [--memory SIZE] [--workers N]
    [--upload-disk SIZE]``: check the model, then serve the page until Ctrl+C."""
    args = parser().parse_args(argv)
    store.clean_stale_dirs()  # uploads and exports of an app that was killed
    # a --model beyond the shipped ones is checked in its worker too
    configure_limits(args.memory, args.workers, args.upload_disk)
    try:
        device = store.resolve_device(args.device)
        model = args.model or next(iter(store.shipped_models().values()), None)
        if model is None:
            raise AttnvizError("no model under models/: train one or pass --model PATH")
        store.get_checkpoint(model, device)  # fail now, with one line, not in the page
    except AttnvizError as exc:
        print(f"attnviz app: {exc}", file=sys.stderr)
        return 2
    from .ui import build_app  # gradio: only once the server really starts

    torch.set_num_threads(max(1, args.threads))
    for line in exposure_warnings(args.host, args.share):
        print(line, file=sys.stderr, flush=True)
    demo = build_app(model, device, max_upload=args.max_upload)
    demo.queue(default_concurrency_limit=QUEUE_CONCURRENCY)
    inbrowser = sys.stdout.isatty() and not args.no_browser
    kwargs = launch_kwargs(args.host, args.port, args.share, args.max_upload)
    demo.launch(inbrowser=inbrowser, **kwargs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
