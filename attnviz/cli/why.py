"""``attnviz why`` (logit lens and direct logit attribution of one prediction), ``attnviz
patch`` (activation patching between a clean and a corrupted input) and ``attnviz flow``
(information-flow routes): thin over :mod:`attnviz.analysis.why`, ``.dla``, ``.patching`` and
``.flow``. Every result can be written with ``--out FILE.json`` or ``--out FILE.npz``.
"""

from __future__ import annotations

import argparse

from ..checkpoint import load_checkpoint
from ..core.errors import InputError


def _token(value: str | None):
    """``--token 17`` is an id only as ``#17``; anything else is the token's text."""
    if value is not None and value.startswith("#") and value[1:].isdigit():
        return int(value[1:])
    return value


def _save(result, path: str | None) -> None:
    if path:
        print(f"wrote {result.save(path)}")


def _why(args: argparse.Namespace) -> int:
    from ..analysis.dla import direct_attribution
    from ..analysis.why import lens_grid, logit_lens

    ckpt = load_checkpoint(args.checkpoint)
    if args.grid:
        grid = lens_grid(ckpt, args.text, step=args.step)
        print(f"logit lens grid {grid.prob.shape} (layers x positions): probability of each "
              "position's next token")  # fmt: skip
        for name, row in zip(grid.layers, grid.prob, strict=True):
            print(f"{name:>6} " + " ".join(f"{p:.2f}" for p in row))
        _save(grid, args.out)
        return 0
    lens = logit_lens(ckpt, args.text, step=args.step, k=args.k)
    print(lens.text())
    try:
        dla = direct_attribution(
            ckpt, args.text, _token(args.token), _token(args.versus), step=args.step
        )
    except InputError as exc:
        if args.token or args.versus:
            raise
        print(f"direct attribution: {exc}")
        _save(lens, args.out)
        return 0
    print(dla.text(args.n))
    _save(dla, args.out)
    return 0


def _patch(args: argparse.Namespace) -> int:
    from ..analysis.patching import patch

    result = patch(
        load_checkpoint(args.checkpoint), args.clean, args.corrupted, _token(args.answer),
        _token(args.wrong), args.what, step=args.step, direction=args.direction,
        method=args.method,
    )  # fmt: skip
    print(result.text())
    _save(result, args.out)
    return 0


def _flow(args: argparse.Namespace) -> int:
    from ..analysis.flow import flow

    result = flow(load_checkpoint(args.checkpoint), args.text, args.threshold, step=args.step)
    print(result.text())
    _save(result, args.out)
    return 0


def add_why_parsers(sub) -> None:
    """``attnviz why``, ``attnviz patch`` and ``attnviz flow``."""
    tok = "a token's text, or #ID for an id"
    w = sub.add_parser("why", help="why this token: the logit lens and direct logit attribution "
                       "of one prediction")  # fmt: skip
    w.add_argument("checkpoint")
    w.add_argument("--text", required=True, help="the input (a speech model: an audio file)")
    w.add_argument("--step", type=int, help="decoding step to explain (default 0: the first "
                   "token after the input; a masked-LM model: the position)")  # fmt: skip
    w.add_argument("--token", help=f"the token explained (default the argmax): {tok}")
    w.add_argument("--versus", help=f"explain the token and not this one: {tok}")
    w.add_argument("--k", type=int, default=5, help="top tokens per layer (default 5)")
    w.add_argument("--n", type=int, default=12, help="largest parts shown (default 12)")
    w.add_argument("--grid", action="store_true", help="the lens at every layer and position")
    w.add_argument("--out", help="write the attribution (the lens where there is none; with "
                   "--grid the grid) as .json or .npz")  # fmt: skip
    w.set_defaults(func=_why)

    p = sub.add_parser("patch", help="activation patching between a clean and a corrupted input")
    p.add_argument("checkpoint")
    p.add_argument("--clean", required=True)
    p.add_argument("--corrupted", required=True, help="as many tokens as --clean")
    p.add_argument("--answer", required=True, help=f"the clean run's answer: {tok}")
    p.add_argument("--wrong", required=True, help=f"the competing token: {tok}")
    p.add_argument("--what", default="resid",
                   choices=("resid", "heads", "head_positions", "patterns"))  # fmt: skip
    p.add_argument("--direction", default="denoising", choices=("denoising", "noising"))
    p.add_argument("--method", default="exact", choices=("exact", "attribution", "both"))
    p.add_argument("--step", type=int, help="decoding step (default 0)")
    p.add_argument("--out", help="write the grid as .json or .npz")
    p.set_defaults(func=_patch)

    f = sub.add_parser("flow", help="information-flow routes to the predicted token")
    f.add_argument("checkpoint")
    f.add_argument("--text", required=True)
    f.add_argument("--threshold", type=float, default=0.04, help="edges below are pruned")
    f.add_argument("--step", type=int, help="decoding step (default 0)")
    f.add_argument("--out", help="write the graph as .json or .npz")
    f.set_defaults(func=_flow)
