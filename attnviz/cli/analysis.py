"""Commands that measure a checkpoint: ``attnviz align`` (each cross-attention head as a word
aligner, AER), ``attnviz faithfulness`` (comprehensiveness and sufficiency of attention and
its alternatives), ``attnviz induction`` (induction heads), ``attnviz similarity`` (why two
sentences are similar under a sentence embedder) and ``attnviz bench`` (speed and memory against the reference paths).

:func:`task_inputs` is the fallback input of every command that takes ``--text``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ..checkpoint import load_checkpoint
from ..core.errors import AttnvizError


def task_inputs(ckpt, n: int) -> list:
    """``n`` test-split examples of the checkpoint's task (an error when it names none): the
    inputs every command that takes ``--text`` falls back on."""
    from ..train.evaluate import task_of

    return task_of(ckpt).examples("test", n, seed=0)


def _lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise AttnvizError(f"cannot read {path}: {exc.strerror}") from None


def _align(args: argparse.Namespace) -> int:
    from ..analysis import align as al

    ckpt = load_checkpoint(args.checkpoint)
    if args.speech or ckpt.is_audio:
        return _align_speech(ckpt, args)
    if args.sources or args.gold:
        if not (args.sources and args.gold):
            raise AttnvizError("give --sources and --gold together (and --targets if you like)")
        sources, gold = _lines(args.sources), _lines(args.gold)
        targets = _lines(args.targets) if args.targets else None
    else:  # the task's own sentences, teacher-forced on the outputs the gold links refer to
        from ..train.evaluate import task_of

        task = task_of(ckpt, args.checkpoint)
        exs = task_inputs(ckpt, args.n)
        sources, targets = [e.src for e in exs], [e.tgt for e in exs]
        gold = [task.links(e.src) for e in exs]
    report = al.alignment(ckpt, sources, gold, targets, lens=args.lens, setting=args.setting)
    print(report.text())
    if args.pharaoh:
        Path(args.pharaoh).write_text("\n".join(report.pharaoh()) + "\n")
        print(f"wrote the best head's links to {args.pharaoh}")
    if args.json:
        doc = {"lens": args.lens, "setting": args.setting, "n": len(sources),
               "aer": report.aer.tolist(), "layer_aer": report.layer_aer.tolist(),
               "mean_aer": report.mean_aer, "best": {"layer": report.best[0][0],
               "head": report.best[0][1], "aer": report.best[1]}}  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _align_speech(ckpt, args: argparse.Namespace) -> int:
    from ..analysis.speech_align import read_word_times, score_heads

    if not args.speech:
        raise AttnvizError("a speech model is scored against word times: give --speech FILE.jsonl")
    if not ckpt.is_audio:
        raise AttnvizError("--speech is for speech models (Whisper); this model reads text")
    report = score_heads(ckpt, read_word_times(args.speech))
    print(report.text())
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _faithfulness(args: argparse.Namespace) -> int:
    from ..analysis.faithful import faithfulness

    ckpt = load_checkpoint(args.checkpoint)
    texts = args.text or [e.src for e in task_inputs(ckpt, args.n)]
    report = faithfulness(ckpt, texts, step=args.step, k_max=args.k)
    print(report.text())
    if args.json:
        doc = {"n": report.n, "k": report.k,
               "comprehensiveness": {m: c.tolist() for m, c in report.comprehensiveness.items()},
               "sufficiency": {m: c.tolist() for m, c in report.sufficiency.items()},
               "aopc_comprehensiveness": report.aopc(), "aopc_sufficiency": report.aopc("sufficiency")}  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _induction(args: argparse.Namespace) -> int:
    from ..analysis.induction import induction_scores, table

    scores = induction_scores(args.checkpoint, n=args.n, length=args.length, seed=args.seed)
    print(table(scores))
    if args.json:
        Path(args.json).write_text(json.dumps(scores.to_dict(), indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _fill_mask(args: argparse.Namespace) -> int:
    from ..analysis.masked_lm import fill_mask

    print(fill_mask(load_checkpoint(args.checkpoint), args.text, k=args.k).text())
    return 0


def _similarity(args: argparse.Namespace) -> int:
    from ..analysis.similarity import similarity

    if args.top < 1:
        raise AttnvizError(f"--top must be at least 1, got {args.top}")
    ckpt = load_checkpoint(args.checkpoint)
    result = similarity(ckpt, args.a, args.b, attribute=not args.no_attribution)
    print(result.text(args.top))
    return 0


def _bench(args: argparse.Namespace) -> int:
    from ..bench import suite as bench

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("attnviz bench: the GPU rows are skipped: this machine has no CUDA GPU")
        return 0
    result = bench.run(args.device, quick=args.quick, progress=not args.quiet, full=args.full)
    print(bench.table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def add_analysis_parsers(sub) -> None:
    """``attnviz align``, ``attnviz faithfulness`` and ``attnviz bench``."""
    a = sub.add_parser("align", help="score every cross-attention head as a word aligner (AER)",
                       description="Per-head alignment error rate against gold links: the "
                       "task's own links by default, or --sources/--gold (Pharaoh) files.")  # fmt: skip
    a.add_argument("checkpoint")
    a.add_argument("--n", type=int, default=60, help="task test sentences to use (default 60)")
    a.add_argument("--sources", help="a file of input sentences, one per line")
    a.add_argument("--gold", help="a Pharaoh file of gold links (i-j sure, ipj possible)")
    a.add_argument("--targets", help="a file of target sentences to teacher-force "
                   "(default: the model's greedy output)")  # fmt: skip
    a.add_argument("--lens", choices=("weights", "norms", "rollout"), default="weights")
    a.add_argument("--setting", choices=("output", "input"), default="output")
    a.add_argument("--pharaoh", help="write the best head's predicted links here")
    a.add_argument("--speech", help="a speech model: a JSONL file of clips with true word times, "
                   '{"audio": path, "words": [[word, start, end], ...]} per line')  # fmt: skip
    a.add_argument("--json", help="also write the AER grid (speech: the timing scores) as JSON")
    a.set_defaults(func=_align)

    f = sub.add_parser("faithfulness", help="comprehensiveness and sufficiency of attention, "
                       "norms, rollout and Integrated Gradients against a random ranking")  # fmt: skip
    f.add_argument("checkpoint")
    f.add_argument("--text", action="append", help="an input (repeatable; default: the task's "
                   "test inputs)")  # fmt: skip
    f.add_argument("--n", type=int, default=100, help="task test inputs to use (default 100)")
    f.add_argument("--k", type=int, default=5, help="most source tokens blocked or kept")
    f.add_argument("--step", type=int, help="decoding step (default: the middle of the output)")
    f.add_argument("--json", help="also write the curves as JSON here")
    f.set_defaults(func=_faithfulness)

    d = sub.add_parser("induction", help="previous-token and induction score of every head of "
                       "a decoder-only model, and its in-context loss",
                       description="On n sequences <bos> r r (r: --length distinct random "
                       "tokens): each head's mean attention to the previous position, and to "
                       "the token after the earlier occurrence of the current one.")  # fmt: skip
    d.add_argument("checkpoint")
    d.add_argument("--n", type=int, default=100, help="sequences (default 100)")
    d.add_argument("--length", type=int, default=20, help="tokens in each run (default 20)")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--json", help="also write the scores as JSON here")
    d.set_defaults(func=_induction)

    m = sub.add_parser("fill-mask", help="an encoder-only model's top fillers at each mask token",
                       description="BERT, RoBERTa, DistilBERT: the k most likely tokens at every "
                       "mask token of a text (a pair: first [SEP] second).")  # fmt: skip
    m.add_argument("checkpoint")
    m.add_argument("--text", required=True, help='e.g. "the cat sat on the [MASK] ."')
    m.add_argument("--k", type=int, default=5, help="fillers per mask (default 5)")
    m.set_defaults(func=_fill_mask)

    s = sub.add_parser("similarity", help="why two sentences are similar under a sentence "
                       "embedder: the cosine, its top token pairs and input-token attribution",
                       description="A sentence-transformers folder: the cosine of the two "
                       "embeddings, split exactly into token pairs (printed: the largest), and "
                       "Integrated Gradients per input token.")  # fmt: skip
    s.add_argument("checkpoint")
    s.add_argument("--a", required=True, help="the first sentence")
    s.add_argument("--b", required=True, help="the second sentence")
    s.add_argument("--top", type=int, default=10, help="token pairs to print (default 10)")
    s.add_argument("--no-attribution", action="store_true", help="skip Integrated Gradients")
    s.set_defaults(func=_similarity)

    b = sub.add_parser("bench", help="benchmarks: ratios against nn.Transformer and the naive "
                       "decode loop, app step latency, trace memory")  # fmt: skip
    b.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    b.add_argument("--full", action="store_true", help="add the rows that take minutes: "
                   "training reverse to 99%% exact match, measured")  # fmt: skip
    b.add_argument("--device", default="auto", help="auto (CUDA when available), cpu or cuda")
    b.add_argument("--json", help="also write the results as JSON here")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=_bench)
