"""Commands for debugging a decode and comparing checkpoints: ``attnviz beam``,
``attnviz compare``, and ``attnviz export-hf`` (a checkpoint back to a Hugging Face folder).

``compare A B`` prints the most changed heads per kind (mean Jensen–Shannon divergence, base
2), whether the greedy outputs agree, and the target tokens whose probability moved most;
``--json`` and ``--html`` write the whole comparison. ``beam`` prints beam search's finished
hypotheses and writes its search tree as JSON.
"""

from __future__ import annotations

import argparse
import html
import json
from pathlib import Path

from ..analysis.compare import Comparison, compare
from ..checkpoint import load_checkpoint
from ..core.errors import InputError
from ..core.model import KINDS

MAX_TEXTS = 200


def _inputs(args: argparse.Namespace, a) -> tuple[list[str], list[str] | None]:
    """The texts (and references, from a corpus) to compare on."""
    if args.data:
        from ..data.corpus import read_pairs

        pairs = read_pairs(*args.data)[: args.limit]
        return [s for s, _ in pairs], [t for _, t in pairs]
    if args.text:
        return list(args.text), None
    if a.task:
        from .analysis import task_inputs

        return [e.src for e in task_inputs(a, 20)], None
    raise InputError("give inputs to compare on: --text T (repeatable) or --data PATH [PATH2]")


def _compare(args: argparse.Namespace) -> int:
    a, b = load_checkpoint(args.a), load_checkpoint(args.b)
    texts, targets = _inputs(args, a)
    c = compare(a, b, texts, targets)
    print(f"compared {args.a} (a) with {args.b} (b) on {len(texts)} input(s)")
    same = sum(o[2] for o in c.outputs)
    print(f"greedy outputs agree on {same} of {len(c.outputs)} ({100 * c.agreement:.0f} %)")
    for text, (oa, ob, eq) in list(zip(c.texts, c.outputs, strict=True))[:5]:
        if not eq:
            print(f"  {text!r}: a {oa!r}  b {ob!r}")
    for kind in KINDS:
        heads = ", ".join(f"L{lay}H{h} {d:.3f}" for lay, h, d in c.most_changed(kind, 3))
        matched = float(c.matched_divergence[kind].mean())
        print(
            f"{kind:>13}: most changed {heads}; mean {c.divergence[kind].mean():.3f}, "
            f"after matching heads {matched:.3f}"
        )
    print("largest probability changes (a -> b):")
    for t in c.largest_changes(5):
        print(
            f"  input {t.text} position {t.position} {t.token!r}: "
            f"{t.prob_a:.3f} -> {t.prob_b:.3f} (rank {t.rank_a} -> {t.rank_b})"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(c.to_dict(), indent=1), encoding="utf-8")
        print(f"wrote {args.json}")
    if args.html:
        Path(args.html).write_text(to_html(c, args.a, args.b), encoding="utf-8")
        print(f"wrote {args.html}")
    return 0


def _cell(d: float) -> str:
    light = 97 - int(60 * min(max(d, 0.0), 1.0) ** 0.5)  # 0 -> near white, 1 -> deep red
    return f'<td style="background:hsl(0,75%,{light}%);color:#111">{d:.3f}</td>'


def to_html(c: Comparison, name_a: str, name_b: str) -> str:
    """A self-contained page: the divergence grid per kind with the matching, and token changes."""
    e = html.escape
    parts = [
        "<!doctype html><meta charset=utf-8><title>attnviz compare</title>",
        "<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}"
        "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;"
        "padding:3px 7px;text-align:right}</style>",
        f"<h1>{e(name_a)} (a) vs {e(name_b)} (b)</h1>",
        f"<p>{len(c.texts)} input(s); greedy outputs agree on {100 * c.agreement:.0f} %.</p>",
    ]
    for kind in KINDS:
        d, m = c.divergence[kind], c.matching[kind]
        parts.append(
            f"<h2>{kind}</h2><p>Mean JS divergence (bits) of head (l, h) of a and of "
            "b; under each row, the head of b each head of a is matched to.</p><table>"
        )
        parts.append("<tr><th></th>" + "".join(f"<th>H{h}</th>" for h in range(d.shape[1])))
        for layer in range(d.shape[0]):
            parts.append(f"<tr><th>L{layer}</th>" + "".join(_cell(x) for x in d[layer]))
            parts.append(
                "<tr><th>matched</th>"
                + "".join(
                    f"<td>b H{j} ({c.matched_divergence[kind][layer, h]:.3f})</td>"
                    for h, j in enumerate(m[layer])
                )
            )
        parts.append("</table>")
    parts.append("<h2>Outputs and target tokens</h2>")
    for i, text in enumerate(c.texts):
        oa, ob, eq = c.outputs[i]
        parts.append(f"<p><b>{e(text)}</b> → a: {e(oa)} · b: {e(ob)} {'(same)' if eq else ''}<br>")
        for t in c.tokens[i]:
            hue = 130 if t.change >= 0 else 0
            alpha = min(abs(t.change) * 2, 1.0)
            parts.append(
                f'<span title="a {t.prob_a:.3f} → b {t.prob_b:.3f}" style="padding:1px'
                f' 3px;background:hsla({hue},70%,50%,{alpha:.2f})">{e(t.token)}</span> '
            )
        parts.append("</p>")
    return "\n".join(parts)


def add_compare_parser(sub) -> None:
    """Register ``attnviz compare`` on the CLI's subparsers."""
    p = sub.add_parser(
        "compare",
        help="compare two checkpoints head by head (JS divergence, "
        "matched heads, output agreement, probability changes)",
    )
    p.add_argument("a", help="checkpoint folder a (e.g. before fine-tuning)")
    p.add_argument("b", help="checkpoint folder b (same tokenizers, layers and heads)")
    p.add_argument("--text", action="append", help="an input (repeatable)")
    p.add_argument(
        "--data",
        nargs="+",
        metavar="PATH",
        help="a corpus (TSV, JSONL, or two aligned files): sources and references",
    )
    p.add_argument(
        "--limit",
        type=int,
        default=MAX_TEXTS,
        help=f"most corpus pairs to use (default {MAX_TEXTS})",
    )
    p.add_argument("--json", metavar="FILE", help="write the comparison as JSON")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML page")
    p.set_defaults(func=_compare)


def _beam(args: argparse.Namespace) -> int:
    """Beam search on one input: the finished hypotheses, best first; the tree as JSON."""
    from ..decode.beam import beam_predict, folder_num_beams

    ckpt = load_checkpoint(args.checkpoint)
    early = {"true": True, "false": False, "never": "never", None: None}[args.early_stopping]
    k = args.num_beams
    if k is None:  # the generation config's beam size, where it names one
        k = folder_num_beams(ckpt) if folder_num_beams(ckpt) > 1 else 4
    result = beam_predict(ckpt, args.text, k, args.max_len,
                          length_penalty=args.length_penalty, early_stopping=early,
                          no_repeat_ngram_size=args.no_repeat_ngram_size, return_tree=True)  # fmt: skip
    print(f"input : {args.text}")
    for rank, hyp in enumerate(result.hypotheses, 1):
        text = ckpt.tgt_tokenizer.decode(hyp.tokens)
        print(f"  {rank}. {hyp.normalized_score:8.4f}  (log-prob {hyp.score:.4f}, "
              f"{len(hyp.tokens)} tokens)  {text}")  # fmt: skip
    print(f"output: {ckpt.tgt_tokenizer.decode(result.tokens)}")
    if args.json:
        tree = result.tree
        doc = {"input": args.text, "output": ckpt.tgt_tokenizer.decode(result.tokens),
               "tokens": result.tokens, **tree.to_dict(),
               "pieces": [ckpt.tgt_tokenizer.token(n.token) for n in tree.nodes]}  # fmt: skip
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json} ({len(tree.nodes)} nodes)")
    return 0


def add_beam_parser(sub) -> None:
    """Register ``attnviz beam`` on the CLI's subparsers."""
    b = sub.add_parser("beam", help="beam search on one input: the hypotheses, and the search "
                       "tree as JSON", description="Beam search as transformers' generate("
                       "num_beams=k) runs it, following the checkpoint's generation config; "
                       "options given here override it.")  # fmt: skip
    b.add_argument("checkpoint")
    b.add_argument("--text", required=True, help="the input")
    b.add_argument("--num-beams", type=int, help="beam size (default: the generation config's, "
                   "else 4)")  # fmt: skip
    b.add_argument("--max-len", type=int, help="most tokens to produce")
    b.add_argument("--length-penalty", type=float, help="rank by log-prob / length ** this")
    b.add_argument("--early-stopping", choices=("true", "false", "never"))
    b.add_argument("--no-repeat-ngram-size", type=int)
    b.add_argument("--json", help="write the search tree (nodes, best) as JSON here")
    b.set_defaults(func=_beam)


def _export_hf(args: argparse.Namespace) -> int:
    """Write a checkpoint of a Hugging Face family as a folder transformers loads."""
    from ..interop.hf.export import AUTO_CLASSES, export_hf

    ckpt = load_checkpoint(args.run)
    out = export_hf(ckpt, args.out)
    kind = ckpt.meta.get("model_type")
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    print(f"wrote {out} ({kind}): {files}")
    auto = AUTO_CLASSES[ckpt.config.arch]
    print(f"load it with transformers: {auto}.from_pretrained({str(out)!r})")
    return 0


def add_export_hf_parser(sub) -> None:
    """Register ``attnviz export-hf`` on the CLI's subparsers."""
    e = sub.add_parser(
        "export-hf",
        help="write a checkpoint of a Hugging Face family (e.g. a fine-tuned Marian) as a "
        "folder transformers loads",
        description="Writes config.json, generation_config.json, model.safetensors and the "
        "tokenizer files, for a Hugging Face folder attnviz opened or a checkpoint fine-tuned "
        "from one (attnviz train --init FOLDER); transformers' generate() then gives the text "
        "attnviz's predict gives. attnviz's own models have no transformers class.",
    )
    e.add_argument("run", help="the checkpoint folder (e.g. the --out of attnviz train --init)")
    e.add_argument("out", help="a new (or empty) folder to write")
    e.set_defaults(func=_export_hf)
