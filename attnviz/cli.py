"""The ``attnviz`` command line.

Errors a user can cause are printed as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import string
import sys
import time

import torch

from . import __version__
from .config import ModelConfig
from .decoding import GreedyStepper
from .errors import AttnvizError
from .model import Transformer

PAD, BOS, EOS = 0, 1, 2
LETTERS = string.ascii_lowercase
_OFFSET = 3  # ids of 'a'..'z' start after PAD, BOS, EOS


def encode_letters(text: str) -> list[int]:
    """Lowercase letters -> ids (the demo's character vocabulary)."""
    bad = sorted({c for c in text if c not in LETTERS})
    if bad:
        raise AttnvizError(f"the demo model reads only a-z; got {''.join(bad)!r}")
    if not text:
        raise AttnvizError("type at least one letter")
    return [LETTERS.index(c) + _OFFSET for c in text]


def decode_letters(ids: list[int]) -> str:
    return "".join(LETTERS[i - _OFFSET] for i in ids if i >= _OFFSET)


def reversal_batch(n: int, min_len: int, max_len: int, generator: torch.Generator) -> tuple:
    """A padded batch of the string-reversal task.

    Returns:
        ``src [n, Ts]``, ``tgt_in [n, Tt]`` (BOS + reversed), ``tgt_out [n, Tt]`` (reversed + EOS),
        all padded with PAD.
    """
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    t = int(lengths.max())
    src = torch.full((n, t), PAD)
    tgt_in = torch.full((n, t + 1), PAD)
    tgt_out = torch.full((n, t + 1), PAD)
    for i, length in enumerate(lengths.tolist()):
        ids = torch.randint(_OFFSET, _OFFSET + len(LETTERS), (length,), generator=generator)
        src[i, :length] = ids
        tgt_in[i, 0] = BOS
        tgt_in[i, 1 : length + 1] = ids.flip(0)
        tgt_out[i, :length] = ids.flip(0)
        tgt_out[i, length] = EOS
    return src, tgt_in, tgt_out


def train_reversal(
    steps: int, seed: int = 0, max_len: int = 10, progress: bool = True
) -> Transformer:
    """Train a tiny model on string reversal (the demo; ``attnviz train`` is the full tool)."""
    from tqdm import tqdm

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    cfg = ModelConfig(
        src_vocab_size=_OFFSET + len(LETTERS),
        tgt_vocab_size=_OFFSET + len(LETTERS),
        d_model=64,
        n_heads=4,
        d_ff=128,
        dropout=0.0,
        max_len=64,
    )
    model = Transformer(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps, pct_start=0.1)
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD)
    bar = tqdm(range(steps), desc="training a tiny reversal model", disable=not progress)
    for _ in bar:
        src, tgt_in, tgt_out = reversal_batch(64, 1, max_len, gen)
        logits = model(src, tgt_in, src == PAD, tgt_in == PAD)
        loss = loss_fn(logits.flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        bar.set_postfix(loss=f"{loss.item():.3f}")
    return model.eval()


def _demo(args: argparse.Namespace) -> int:
    ids = encode_letters(args.text)
    start = time.perf_counter()
    model = train_reversal(args.steps, seed=args.seed)
    print(f"trained {model.num_parameters():,} parameters in {time.perf_counter() - start:.0f}s")
    stepper = GreedyStepper(model, torch.tensor(ids), BOS, EOS, max_len=len(ids) + 5)
    print(f"input : {args.text}")
    for res in iter(stepper.step, None):
        cross = res.attention["cross", model.config.n_decoder_layers - 1].mean(0)  # [Ts]
        src_pos = int(cross.argmax())
        shown = "<eos>" if res.token == EOS else decode_letters([res.token])
        print(
            f"  step {res.step:2d}: {shown:5s} p={res.prob:.2f}  looks most at input "
            f"position {src_pos} ({args.text[src_pos]!r})"
        )
        if res.done:
            break
    print(f"output: {decode_letters(stepper.tokens)}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from .train import TrainOptions, train

    fields = {f.name for f in dataclasses.fields(TrainOptions)}
    opts = TrainOptions(**{k: v for k, v in vars(args).items() if k in fields})
    metrics = train(opts, progress=not args.quiet)
    if metrics and opts.out:
        print(
            f"saved {opts.out}: step {metrics['step']}, validation exact match "
            f"{metrics['val_exact_match']:.4f}, token accuracy {metrics['val_token_acc']:.4f}, "
            f"{metrics['elapsed_s']:.0f}s"
        )
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from .train import exact_match_by_length

    results = exact_match_by_length(args.checkpoint, per_length=args.per_length, split=args.split)
    right = sum(r for r, _ in results.values())
    total = sum(n for _, n in results.values())
    for length, (r, n) in results.items():
        print(f"length {length:3d}: {r}/{n} = {r / max(n, 1):.4f}")
    print(f"exact match on {args.split}: {right}/{total} = {right / max(total, 1):.4f}")
    worst = min(r / n for r, n in results.values() if n)
    print(f"worst length: {worst:.4f}")
    return 0


def _add_train_parser(sub) -> None:
    from .tasks import TASKS

    p = sub.add_parser(
        "train",
        help="train a model on a built-in task and save a checkpoint folder",
        description="Train on a built-in task. Unset options come from the saved run (with "
        "--resume), else the task's defaults. Runs under `torchrun --nproc_per_node N` with "
        "DistributedDataParallel as well.",
    )
    p.add_argument(
        "--task",
        required=True,
        choices=sorted(TASKS),
        help="; ".join(f"{n}: {t.description}" for n, t in sorted(TASKS.items())),
    )
    p.add_argument("--out", help="checkpoint folder to write (created; rewritten at each eval)")
    add = p.add_argument
    add("--steps", type=int, help="optimiser steps")
    add("--batch-size", type=int, help="examples per step (per process under torchrun)")
    add("--lr", type=float, help="peak learning rate (AdamW)")
    add("--warmup", type=int, help="linear warm-up steps before cosine decay")
    add("--weight-decay", type=float, help="AdamW weight decay (default 0.01)")
    add("--label-smoothing", type=float, help="default 0")
    add("--clip", type=float, help="gradient-norm clipping (default 1.0)")
    add("--d-model", type=int)
    add("--n-heads", "--heads", dest="n_heads", type=int)
    add("--n-encoder-layers", "--encoder-layers", dest="n_encoder_layers", type=int)
    add("--n-decoder-layers", "--decoder-layers", dest="n_decoder_layers", type=int)
    add("--d-ff", type=int)
    add("--dropout", type=float)
    add("--norm-first", action="store_true", default=None, help="pre-norm residual blocks")
    add("--activation", choices=("relu", "gelu"))
    add("--max-len", type=int, help="longest sequence the model accepts")
    add("--eval-every", type=int, help="validate and save every N steps (default 250)")
    add("--eval-size", type=int, help="validation examples (default 500)")
    add("--snapshot-every", type=int, help="record probe attention every N steps (default 100)")
    add("--target-exact-match", type=float, help="stop once validation exact match reaches this")
    add("--seed", type=int, help="default 0")
    add("--device", default="auto", help="auto (CUDA if available), cpu or cuda")
    add("--resume", action="store_true", help="continue the run saved in --out")
    add("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_train)

    e = sub.add_parser("evaluate", help="greedy exact match of a checkpoint per input length")
    e.add_argument("checkpoint")
    e.add_argument("--split", default="test", choices=("train", "validation", "test"))
    e.add_argument("--per-length", type=int, default=200, help="examples per length (default 200)")
    e.set_defaults(func=_evaluate)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnviz", description=__doc__)
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    sub = parser.add_subparsers(dest="subcommand", required=True)
    for name, help_text in (
        ("demo", "train a tiny string-reversal model and decode an example step by step"),
        ("app", "open the attention inspector (for now: the demo, until the app lands)"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--text", default="helloworld", help="input to reverse (a-z)")
        p.add_argument("--steps", type=int, default=1500, help="training steps (default 1500)")
        p.add_argument("--seed", type=int, default=0)
        p.set_defaults(func=_demo)
    _add_train_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.command = "attnviz " + shlex.join(argv)
    try:
        return args.func(args)
    except AttnvizError as exc:
        print(f"attnviz: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
