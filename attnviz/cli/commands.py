"""The ``attnviz`` command line.

Errors a user can cause are printed as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from ..checkpoint import load_checkpoint
from ..core.errors import AttnvizError, one_line
from ..core.sites import parse_head
from ..core.version import __version__
from . import analysis as cli_analysis
from . import debug as cli_debug
from . import why as cli_why
from .analysis import task_inputs  # noqa: F401  (public here before cli_analysis)

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "models" / "reverse"


def source_of(ckpt, args: argparse.Namespace) -> str:
    """The input a command runs ``ckpt`` on: ``--audio CLIP`` for a speech model (a path in
    ``--text`` is read as the clip too), else ``--text``."""
    audio = getattr(args, "audio", None)
    if audio is not None and not ckpt.is_audio:
        raise AttnvizError("--audio is for speech models (Whisper); this model reads --text")
    source = audio if audio is not None else args.text
    if source is None:
        raise AttnvizError("give the input: --audio CLIP for a speech model, else --text TEXT")
    return source


def _step_through(args: argparse.Namespace) -> int:
    """Greedy-decode one input step by step, printing where the last layer looks (the source
    through cross-attention; a decoder-only model's prompt and output so far through
    self-attention)."""
    from ..analysis.export import frames_encoding

    ckpt = load_checkpoint(args.model)
    source = source_of(ckpt, args)
    if ckpt.config.encoder_only:
        raise AttnvizError("an encoder-only model generates nothing to step through: use inspect")
    stepper = ckpt.stepper(source)  # the checkpoint's ids and generation rules
    enc = frames_encoding(stepper) if ckpt.is_audio else ckpt.encode_source(source)
    if enc.unknown:
        print(f"note: not in this model's vocabulary, read as <unk>: {' '.join(enc.unknown)}")
    last = ckpt.config.n_decoder_layers - 1
    one_stack = ckpt.config.decoder_only
    kind = "decoder_self" if one_stack else "cross"
    print(f"model : {args.model} (task {ckpt.task}, {ckpt.model.num_parameters():,} parameters)")
    print(f"input : {source}")
    keys = list(enc.pieces)
    for res in iter(stepper.step, None):
        row = res.attention[kind, last].mean(0)  # [Tk], mean over heads
        pos = int(row.argmax())
        where = "time" if ckpt.is_audio else "position" if one_stack else "input position"
        print(
            f"  step {res.step:2d}: {ckpt.tgt_tokenizer.token(res.token):8s} p={res.prob:.2f}  "
            f"looks most at {where} {pos} ({keys[pos] if pos < len(keys) else '?'!r}, "
            f"weight {float(row[pos]):.2f})"
        )
        if one_stack:
            keys.append(ckpt.tgt_tokenizer.token(res.token))
        if res.done:
            break
    print(f"output: {ckpt.tgt_tokenizer.decode(stepper.tokens)}")
    return 0


def _train(args: argparse.Namespace) -> int:
    from ..train.loop import TrainOptions, train

    fields = {f.name for f in dataclasses.fields(TrainOptions)}
    opts = TrainOptions(**{k: v for k, v in vars(args).items() if k in fields})
    metrics = train(opts, progress=not args.quiet)
    if metrics and opts.out:
        print(
            f"saved {opts.out}: step {metrics['step']}, validation exact match "
            f"{metrics['val_exact_match']:.4f}, token accuracy {metrics['val_token_acc']:.4f}, "
            f"BLEU {metrics['val_bleu']:.2f}, chrF {metrics['val_chrf']:.2f}, "
            f"{metrics['elapsed_s']:.0f}s"
            + (
                f"; the checkpoint holds step {metrics['kept_step']}'s weights"
                if metrics.get("kept_step", metrics["step"]) != metrics["step"]
                else ""
            )  # fmt: skip
        )
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from ..train.evaluate import evaluate_pairs, exact_match_by_length

    if args.data:
        from ..data.corpus import read_pairs

        if len(args.data) > 2:
            raise AttnvizError("--data takes one file (.tsv, .jsonl) or two aligned files")
        pairs = read_pairs(args.data[0], args.data[1] if len(args.data) > 1 else None,
                           langs=args.langs)  # fmt: skip
        report = evaluate_pairs(args.checkpoint, pairs)
        print(report.text())
        if args.predictions:
            Path(args.predictions).write_text("".join(p + "\n" for p in report.predictions),
                                              encoding="utf-8")  # fmt: skip
            print(f"wrote {len(report.predictions)} outputs to {args.predictions}")
        if args.json:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
            print(f"wrote {args.json}")
        return 0
    if args.json or args.predictions or args.langs:
        raise AttnvizError("--json, --predictions and --langs go with --data")
    if args.per_length < 1:
        raise AttnvizError("--per-length must be at least 1")
    results = exact_match_by_length(args.checkpoint, per_length=args.per_length, split=args.split)
    right = sum(r for r, _ in results.values())
    total = sum(n for _, n in results.values())
    for length, (r, n) in results.items():
        print(f"length {length:3d}: {r}/{n} = {r / max(n, 1):.4f}")
    print(f"exact match on {args.split}: {right}/{total} = {right / max(total, 1):.4f}")
    worst = min(r / n for r, n in results.values() if n)
    print(f"worst length: {worst:.4f}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from ..analysis.health import check
    from ..core.record import DropMask

    ckpt = load_checkpoint(args.checkpoint)
    edits = [DropMask(args.drop_mask)] if args.drop_mask else []
    report = check(ckpt, texts=args.text or None, n=args.n, edits=edits,
                   ablation_sample=args.ablation_sample)  # fmt: skip
    print(report.text())
    if args.json:
        Path(args.json).write_text(report.to_json() + "\n")
        print(f"wrote {args.json}")
    return 0 if report.passed else 1


def _inspect(args: argparse.Namespace) -> int:
    from ..analysis import export

    if args.words and not (args.json or args.npz or args.html):
        raise AttnvizError("--words goes with --json, --npz or --html")
    unit = "words" if args.words else "pieces"
    ckpt = load_checkpoint(args.checkpoint)
    source = source_of(ckpt, args)
    result = export.inspect_text(ckpt, source)
    print(f"input : {source}")
    if result.unknown:
        print(f"note  : read as <unk>: {' '.join(result.unknown)}")
    print(f"output: {result.output}")
    for s in result.stats:
        print(f"  {s.kind:12s} L{s.layer} H{s.head}: {s.role:26s} entropy {s.norm_entropy:.2f}  "
              f"max {s.max_weight:.2f}")  # fmt: skip
    if args.ablate:
        from ..analysis.ablation import ablate

        heads = [parse_head(h) for h in args.ablate]
        res = ablate(ckpt, args.text, heads)
        print(f"ablating {', '.join(args.ablate)}: output {res.ablated!r} (was {res.baseline!r}); "
              f"mean change in the chosen tokens' probability {res.prob_change.mean():+.3f}")  # fmt: skip
    if args.causal_off:
        from ..analysis.masking import causal_experiment

        print(causal_experiment(ckpt, [args.text]).summary())
    if args.html:
        from ..render.report import write_html

        print(f"wrote {write_html(result, args.html, ckpt, unit)}")
    if args.json:
        print(f"wrote {export.write_json(result, args.json, unit)}")
    if args.npz:
        print(f"wrote {export.write_npz(result, args.npz, unit)}")
    if args.png:
        from ..render.report import inspection_figures, write_png

        folder = Path(args.png)
        folder.mkdir(parents=True, exist_ok=True)
        for i, fig in enumerate(inspection_figures(result).values()):
            write_png(fig, folder / f"figure-{i:02d}.png")
        print(f"wrote PNGs to {folder}")
    return 0


def _add_model_parsers(sub) -> None:
    """``attnviz check`` and ``attnviz inspect``."""
    c = sub.add_parser(
        "check",
        help="health check of a checkpoint: mask leaks, NaN, dead/removable heads, accuracy",
        description="Exit status 0 when the check passes, 1 when it finds an error: a mask "
        "leak, NaN, or exact match below 0.5 against the task's true targets.",
    )
    c.add_argument("checkpoint")
    c.add_argument("--text", action="append", help="an input to check on (repeatable; default: "
                   "the task's validation inputs)")  # fmt: skip
    c.add_argument("--n", type=int, default=200, help="validation inputs to use (default 200)")
    c.add_argument("--ablation-sample", type=int, default=32,
                   help="inputs for the removable-heads search (0 skips it)")  # fmt: skip
    c.add_argument("--drop-mask", choices=("padding", "causal", "both"),
                   help="run with a mask switched off, to see what a broken model looks like")  # fmt: skip
    c.add_argument("--json", help="also write the report as JSON here")
    c.set_defaults(func=_check)

    i = sub.add_parser(
        "inspect",
        help="decode one input and export its attention (HTML page, JSON, NPZ)",
    )
    i.add_argument("checkpoint")
    i.add_argument("--text", help="the input (a speech model: the clip's path)")
    i.add_argument("--audio", metavar="CLIP", help="a speech model's input: an audio file")
    i.add_argument("--html", help="write one self-contained offline HTML page with every view")
    i.add_argument("--json", help="write tokens, weights, masks and probabilities as JSON")
    i.add_argument("--npz", help="write the same arrays as a NumPy .npz")
    i.add_argument("--words", action="store_true",
                   help="--json/--npz/--html hold attention pooled into words (summed over a "
                   "word's key pieces, averaged over its query pieces), with word labels")  # fmt: skip
    i.add_argument("--png", help="write each figure as PNG into this folder (needs kaleido)")
    i.add_argument("--ablate", action="append", metavar="KIND:LAYER:HEAD",
                   help="zero a head (repeatable) and show the output change")  # fmt: skip
    i.add_argument("--causal-off", action="store_true",
                   help="rerun with the causal mask off and show what changes")  # fmt: skip
    i.set_defaults(func=_inspect)


def _model_flag_help() -> dict[str, str]:
    """ModelConfig's docstring ``Args`` lines, by field: the help of the model flags."""
    from ..core.config import ModelConfig

    out, name = {}, None
    for line in (ModelConfig.__doc__ or "").split("Args:")[-1].splitlines():
        head, _, rest = line.strip().partition(": ")
        if rest and head.replace(" / ", "").replace("_", "").isalnum():
            names = head.split(" / ")
            for name in names:
                out[name] = rest
        elif name and line.strip():
            for n in names:
                out[n] += " " + line.strip()
    return out


def _add_model_flags(p) -> None:
    """One flag per ModelConfig field a run chooses (sizes, activation, norms, positions...)."""
    from ..core.config import ACTIVATIONS, NORMS, POSITIONS, ModelConfig
    from ..train.loop import MODEL_FIELDS

    fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    helps = _model_flag_help()
    aliases = {"n_heads": ["--heads"], "n_encoder_layers": ["--encoder-layers"],
               "n_decoder_layers": ["--decoder-layers"]}  # fmt: skip
    choices = {"activation": ACTIVATIONS, "norm": NORMS, "positions": POSITIONS}
    g = p.add_argument_group("model", "every field of the model config (default: the preset, "
                             "else the task's or the corpus's size)")  # fmt: skip
    for name in MODEL_FIELDS:
        flags = [f"--{name.replace('_', '-')}", *aliases.get(name, [])]
        kind = str(fields[name].type).split(" |")[0]
        text = helps.get(name, "").replace("``", "").replace(":data:", "")
        if name == "activation":
            text = "the feed-forward activation"
        if name == "max_len":
            text = ("longest sequence the model accepts; with --data, pairs with more tokens "
                    "are dropped and counted (default 256 for a corpus)")  # fmt: skip
        if kind == "bool":
            g.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=None,
                           help=text)  # fmt: skip
        else:
            typ = {"int": int, "float": float}.get(kind, str)
            g.add_argument(*flags, dest=name, type=typ, choices=choices.get(name), help=text)


def _add_train_parser(sub) -> None:
    from ..data.tasks import TASKS
    from ..train.feeds import PRESETS

    p = sub.add_parser(
        "train",
        help="train a model on a built-in task or your parallel corpus; save a checkpoint folder",
        description="Train on a built-in task (--task) or a parallel corpus (--data). Unset "
        "options come from the saved run (with --resume), else --preset, else the task's or "
        "the corpus's defaults. Runs under `torchrun --nproc_per_node N` with "
        "DistributedDataParallel as well.",
    )
    p.add_argument(
        "--task",
        choices=sorted(TASKS),
        help="; ".join(f"{n}: {t.description}" for n, t in sorted(TASKS.items())),
    )
    p.add_argument("--init", metavar="FOLDER", help="fine-tune this checkpoint folder (attnviz's "
                   "own, an nn.Transformer import or a Hugging Face folder) on --data: its "
                   "weights, config, tokenizers and generation rules are kept, the optimiser "
                   "starts fresh; model-size and tokenizer options are refused")  # fmt: skip
    p.add_argument("--data", nargs="+", metavar="PATH", help="a corpus: one .tsv "
                   "(source<TAB>target) or .jsonl ({\"translation\": {...}}) file, or two "
                   "aligned plain-text files (line i of one <-> line i of the other)")  # fmt: skip
    p.add_argument("--dev", nargs="+", metavar="PATH", help="dev pairs, same formats (default: "
                   "a held-out slice of --data, by hash of the source)")  # fmt: skip
    p.add_argument("--langs", nargs=2, metavar=("SRC", "TGT"),
                   help="the source and target keys of a .jsonl corpus")  # fmt: skip
    p.add_argument("--out", help="checkpoint folder to write (created; rewritten at each eval)")
    add = p.add_argument
    add("--tokenizer", choices=("char", "word", "bpe", "unigram"),
        help="corpus tokenizer, trained on the training pairs (default bpe)")  # fmt: skip
    add("--vocab-size", type=int, help="subword vocabulary size (bpe, unigram)")
    add("--shared-vocab", action="store_true", default=None,
        help="one vocabulary for source and target")  # fmt: skip
    add("--byte-fallback", action="store_true", default=None,
        help="unseen characters become byte tokens instead of <unk>")  # fmt: skip
    add("--preset", choices=tuple(PRESETS), help="model size: "
        + "; ".join(f"{k}: {v['n_encoder_layers']}+{v['n_decoder_layers']} layers, d_model "
                    f"{v['d_model']}, {v['n_heads']} heads, d_ff {v['d_ff']}"
                    for k, v in PRESETS.items()))  # fmt: skip
    add("--steps", type=int, help="optimiser steps")
    add("--batch-size", type=int, help="examples per step (per process under torchrun)")
    add("--lr", type=float, help="peak learning rate (AdamW)")
    add("--warmup", type=int, help="linear warm-up steps before cosine decay")
    add("--weight-decay", type=float, help="AdamW weight decay (default 0.01)")
    add("--label-smoothing", type=float, help="default 0")
    add("--clip", type=float, help="gradient-norm clipping (default 1.0)")
    add("--eval-every", type=int, help="validate and save every N steps (default 250)")
    add("--eval-size", type=int, help="validation examples (default 500)")
    add("--snapshot-every", type=int, help="record probe attention every N steps (default 100)")
    add("--target-exact-match", type=float, help="stop once validation exact match reaches this")
    add("--target-chrf", type=float, help="stop once validation chrF (0-100) reaches this")
    add("--keep", choices=("best", "last"),
        help="the checkpoint holds the best validation's weights (exact match for a task, "
             "chrF for a corpus; default) or the last step's")  # fmt: skip
    add("--patience", type=int,
        help="stop after N validations without a better one (default: train every step)")  # fmt: skip
    add("--seed", type=int, help="default 0")
    add("--device", default="auto", help="auto (CUDA if available), cpu or cuda")
    add("--resume", action="store_true", help="continue the run saved in --out")
    add("--quiet", action="store_true", help="no progress bar")
    _add_model_flags(p)
    p.set_defaults(func=_train)

    e = sub.add_parser(
        "evaluate",
        help="exact match per input length, BLEU and chrF of a checkpoint",
        description="Without --data: greedy exact match on the checkpoint's task's split, per "
        "input length. With --data: exact match (overall and per source length), BLEU and "
        "chrF (sacrebleu) of the outputs against the corpus's references. Outputs are greedy, "
        "or beam search where the checkpoint's generation config sets num_beams > 1.",
    )
    e.add_argument("checkpoint")
    e.add_argument("--split", default="test", choices=("train", "validation", "test"))
    e.add_argument("--per-length", type=int, default=200, help="examples per length (default 200)")
    e.add_argument("--data", nargs="+", metavar="PATH", help="a corpus to score on (as train)")
    e.add_argument("--langs", nargs=2, metavar=("SRC", "TGT"), help="keys of a .jsonl corpus")
    e.add_argument("--json", help="also write the scores as JSON here")
    e.add_argument("--predictions", help="write the outputs here, one per line")
    e.set_defaults(func=_evaluate)


# -- attnviz data: a built-in task written as corpus files -----------------------------------
def _data(args: argparse.Namespace) -> int:
    from ..data.corpus import write_task_corpus
    from ..data.tasks import get_task

    sizes = {"train": args.train, "dev": args.dev, "test": args.test}
    for path, n in write_task_corpus(get_task(args.task), args.out, sizes, seed=args.seed):
        print(f"wrote {path} ({n:,} pairs)")
    print(f"next: attnviz train --data {Path(args.out) / 'train.tsv'} "
          f"--dev {Path(args.out) / 'dev.tsv'} --out models/mine")  # fmt: skip
    return 0


def _add_data_parser(sub) -> None:
    from ..data.tasks import TASKS

    d = sub.add_parser("data", help="write a built-in task as train/dev/test TSV corpus files",
                       description="Write a built-in task's splits as source<TAB>target files "
                       "(train.tsv, dev.tsv, test.tsv), to train from files.")  # fmt: skip
    d.add_argument("--task", required=True, choices=sorted(TASKS))
    d.add_argument("--out", required=True, help="folder to write (created)")
    d.add_argument("--train", type=int, default=50_000, help="training pairs (default 50000)")
    d.add_argument("--dev", type=int, default=500, help="dev pairs (default 500)")
    d.add_argument("--test", type=int, default=1000, help="test pairs (default 1000)")
    d.add_argument("--seed", type=int, default=0, help="default 0")
    d.set_defaults(func=_data)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnviz", description=__doc__)
    parser.add_argument("--version", action="version", version=f"attnviz {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = parser.add_subparsers(dest="subcommand", required=True)
    sub.add_parser(
        "app",
        help="open the attention inspector in the browser (attnviz app --help for options)",
        add_help=False,
    )
    p = sub.add_parser(
        "step",
        help="decode one input step by step in the terminal, showing where cross-attention looks",
    )
    p.add_argument(
        "--model", default=str(DEFAULT_MODEL), help="checkpoint folder (default models/reverse)"
    )
    p.add_argument("--text", default="helloworld", help="input text")
    p.add_argument("--audio", metavar="CLIP", help="a speech model's input: an audio file")
    p.set_defaults(func=_step_through)
    _add_train_parser(sub)
    cli_analysis.add_analysis_parsers(sub)
    _add_model_parsers(sub)
    _add_data_parser(sub)
    cli_debug.add_compare_parser(sub)
    cli_debug.add_beam_parser(sub)
    cli_debug.add_export_hf_parser(sub)
    cli_why.add_why_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # anywhere on the line: show the traceback of an error
    argv = [a for a in argv if a != "--debug"]
    if argv[:1] == ["app"]:  # the web app parses its own options (and imports gradio)
        from ..app.server import main as app_main

        return app_main(argv[1:])
    args = build_parser().parse_args(argv)
    args.command = "attnviz " + shlex.join(argv)
    try:
        return args.func(args)
    except (AttnvizError, OSError, MemoryError, RecursionError) as exc:
        # OSError: an unwritable output path, say; MemoryError / RecursionError: a file too
        # big or too deeply nested for this machine, whichever step met it
        if debug:
            raise
        print(f"attnviz: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except BaseException as exc:  # a panic in Rust (tokenizers' PanicException) left unnamed
        if debug or type(exc).__name__ != "PanicException":
            raise
        print(f"attnviz: error: a library panicked: {one_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
