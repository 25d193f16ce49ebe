"""The ``attnviz`` command line.

Errors a user can cause are printed as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnviz", description=__doc__)
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("demo", "train a tiny string-reversal model and decode an example step by step"),
        ("app", "open the attention inspector (for now: the demo, until the app lands)"),
    ):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--text", default="helloworld", help="input to reverse (a-z)")
        p.add_argument("--steps", type=int, default=1500, help="training steps (default 1500)")
        p.add_argument("--seed", type=int, default=0)
        p.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AttnvizError as exc:
        print(f"attnviz: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
