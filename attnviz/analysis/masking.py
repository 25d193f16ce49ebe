"""Mask experiments: switch a mask off (or block chosen source tokens) in the real model.

Each experiment runs the same inputs twice through the same model: as trained, and with one
mask changed through the recorder's edits (or an extra source padding mask). It returns both
traces, the weight differences, and what changed in the output: teacher-forced next-token
distributions and accuracy against the reference, and the greedy output.

- :func:`causal_experiment`: the decoder's causal mask off. Under teacher forcing the decoder
  can then see the very token it must predict, and its accuracy jumps; greedy decoding has no
  future to see, but every earlier position now attends to later ones when the prefix is
  recomputed, so the output can still change.
- :func:`padding_experiment`: the padding masks off on a padded batch: short inputs attend to
  PAD positions and their outputs can change.
- :func:`block_source`: chosen source positions blocked as if they were padding.
- :func:`mask_lab`: any mix of the three on one input and a companion input of another
  length (so there is padding to unmask), what the app's mask lab shows.

Accuracy is measured against references: given targets, else the task's correct outputs where
the checkpoint names a task and the input is of the task's form, else the model's own greedy
output — and then it is called *agreement with the model's own output*, never accuracy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import InputError
from ..core.record import DropMask, Edit, Trace, record
from ..data.batch import Batch, make_batch, make_lm_batch, source_batch, with_eos
from ..data.tasks import TASKS, get_task
from .ablation import greedy_each
from .labsize import lab_memory, refuse_oversized

#: What the references of an experiment are (``MaskExperiment.reference``).
REFERENCES = {
    "given": "the given targets",
    "task": "the task's correct outputs",
    "model": "the model's own output",
    "mixed": "the task's correct outputs where known, else the model's own output",
}


@dataclass
class Run:
    """One teacher-forced pass and one greedy decode of a batch.

    Attributes:
        trace: the recorded attention of the teacher-forced pass.
        probs: ``[B, Tt, V]`` next-token distributions.
        token_acc: share of reference tokens (end id included, padding excluded) that are the
            argmax; see :attr:`MaskExperiment.metric` for what the references are.
        outputs: greedy outputs as text.
    """

    trace: Trace
    probs: np.ndarray
    token_acc: float
    outputs: list[str]


@dataclass
class MaskExperiment:
    """Before/after of one mask change; see the module docstring.

    Attributes:
        targets: the references teacher-forced, one per input.
        reference: a key of :data:`REFERENCES`: where ``targets`` came from.
        target_ids: the teacher-forced rows (end id included); the model's own outputs are
            its decoded ids, never its text encoded again (not the identity for subwords).
    """

    name: str
    texts: list[str]
    before: Run
    after: Run
    targets: list[str]
    reference: str = "given"
    target_ids: list[list[int]] | None = None

    @property
    def metric(self) -> str:
        """What ``token_acc`` measures, in words."""
        if self.reference == "model":
            return "teacher-forced agreement with the model's own output"
        return f"teacher-forced token accuracy (against {REFERENCES[self.reference]})"

    def weight_diff(self, kind: str, layer: int) -> np.ndarray:
        """``[B, H, Tq, Tk]`` weights after minus before."""
        return self.after.trace.numpy(kind, layer) - self.before.trace.numpy(kind, layer)

    @property
    def max_weight_change(self) -> dict[tuple[str, int], float]:
        return {k: float(np.abs(self.weight_diff(*k)).max()) for k in self.before.trace.keys()}

    @property
    def max_prob_change(self) -> float:
        """Largest change of any next-token probability (teacher-forced)."""
        return float(np.abs(self.after.probs - self.before.probs).max())

    @property
    def changed_outputs(self) -> int:
        return sum(a != b for a, b in zip(self.before.outputs, self.after.outputs, strict=True))

    def summary(self) -> str:
        return (
            f"{self.name}: {self.metric} {self.before.token_acc:.3f} -> "
            f"{self.after.token_acc:.3f}; greedy output changed for {self.changed_outputs} of "
            f"{len(self.texts)} input{'' if len(self.texts) == 1 else 's'}; largest next-token "
            "probability change "
            f"{self.max_prob_change:.3f}"
        )


def references(
    ckpt: Checkpoint, texts: Sequence[str], targets: Sequence[str] | None = None
) -> tuple[list[str], str]:
    """What to teacher-force for ``texts`` and where it came from.

    Returns:
        ``(targets, reference)``: the given targets (``"given"``); else per input the task's
        correct output when the checkpoint names a task and the input is of its form
        (``"task"``), else the model's own greedy output (``"model"``; ``"mixed"`` when both).
    """
    refs, kind, _ = _references(ckpt, texts, targets)
    return refs, kind


def _own_ids(ckpt: Checkpoint, texts: Sequence[str]) -> list[list[int]]:
    """The model's greedy outputs as ids (end id included), as :meth:`Checkpoint.predict`
    decodes them: each row cut at its own length limit, not the padded batch's."""
    ids = [ckpt.encode_source(t).ids for t in texts]
    if ckpt.config.decoder_only:  # prompts are never padded: one at a time
        out = greedy_each(ckpt, ids)
    else:
        batch = source_batch(ids, ckpt.config, ckpt.device)
        out = ckpt.greedy(batch.src, batch.src_pad).tolist()
    return [
        ckpt.decoding.until_end(row[: ckpt.limit(len(own))])
        for row, own in zip(out, ids, strict=True)
    ]


def _references(
    ckpt: Checkpoint, texts: Sequence[str], targets: Sequence[str] | None
) -> tuple[list[str], str, dict[int, list[int]]]:
    """:func:`references` and, by input index, the ids of the model's own outputs."""
    if targets is not None:
        if len(targets) != len(texts):
            raise InputError(f"{len(texts)} inputs but {len(targets)} targets")
        return list(targets), "given", {}
    task = get_task(ckpt.task) if ckpt.task in TASKS else None
    refs: list[str | None] = []
    for text in texts:
        try:
            refs.append(task.target(text) if task is not None else None)
        except (KeyError, IndexError, ValueError):  # not an input of the task's own form
            refs.append(None)
    missing = [i for i, r in enumerate(refs) if r is None]
    own: dict[int, list[int]] = {}
    if missing:
        own = dict(zip(missing, _own_ids(ckpt, [texts[i] for i in missing]), strict=True))
        for i, row in own.items():
            refs[i] = ckpt.tgt_tokenizer.decode(row)
    kind = "task" if not missing else "model" if len(missing) == len(texts) else "mixed"
    return [str(r) for r in refs], kind, own


def _run(
    ckpt: Checkpoint,
    batch: Batch,
    src_pad,
    edits: Sequence[Edit],
    recompute: bool,
    prompts: Sequence[Sequence[int]] = (),
) -> Run:
    """One teacher-forced pass and the greedy decodes; a decoder-only model reads each
    prompt + reference as one sequence (``prompts``: each row's prompt, decoded alone)."""
    model, tok = ckpt.model, ckpt.tgt_tokenizer
    with torch.no_grad(), record(model, edits) as trace:
        if batch.lm:  # [B, T, V]; the padding mask matters once the causal mask is off
            logits = model(batch.src, pad_mask=src_pad)
        else:
            logits = model(batch.src, batch.tgt_in, src_pad, batch.tgt_pad)  # [B, Tt, V]
    real = batch.real
    acc = float(((logits.argmax(-1) == batch.tgt_out) & real).sum() / real.sum())
    if batch.lm:
        out = greedy_each(ckpt, prompts, edits, cache=not recompute)
    else:
        out = ckpt.greedy(batch.src, src_pad, edits, cache=not recompute).tolist()
    return Run(trace, as_numpy(logits.float().softmax(-1)), acc, [tok.decode(r) for r in out])


def experiment(
    name: str,
    ckpt: Checkpoint,
    texts: Sequence[str],
    targets: Sequence[str] | None,
    edits: Sequence[Edit] = (),
    blocked: torch.Tensor | None = None,
    recompute: bool = False,
) -> MaskExperiment:
    """Any mix of mask changes in one before/after run (the named experiments use this).

    Args:
        texts: inputs, run as one padded batch; ``targets``: references (default: the task's
            correct outputs, else the model's own; see :func:`references`).
        edits: edits of the "after" run (e.g. ``DropMask("causal")``).
        blocked: ``[B, Ts]`` bool, source positions to block in the "after" run.
        recompute: greedy decoding recomputes the prefix each step (needed to see the causal
            mask matter; with a KV cache there is no future to attend to).
    """
    texts = list(texts)
    if not texts:
        raise InputError("give at least one input")
    if blocked is not None and any(
        isinstance(e, DropMask) and e.which in ("padding", "both") for e in edits
    ):
        raise InputError(
            "blocked source tokens are blocked through the padding mask, so they cannot be "
            "combined with the padding mask switched off: choose one"
        )
    if blocked is not None and ckpt.config.decoder_only:
        raise InputError(
            "blocking prompt tokens is for encoder-decoder models; a decoder-only model's "
            "mask lab switches its causal or padding mask off"
        )
    for text in texts:
        ckpt.encode_source(text)  # empty or too long: refused here, with the limit
    refs, reference, own = _references(ckpt, texts, targets)
    cfg, tgt_tok = ckpt.config, ckpt.tgt_tokenizer
    rows = [
        own[i] if i in own else with_eos(tgt_tok.encode(r).ids, cfg.eos_id)
        for i, r in enumerate(refs)
    ]  # the model's own output as decoded; a reference text encoded (its end id once)
    prompts: list[list[int]] = []
    if cfg.decoder_only:  # prompt + reference, one sequence a row
        prompts = [ckpt.encode_source(t).ids for t in texts]
        batch = make_lm_batch(prompts, rows, cfg, "target", ckpt.device)
    else:
        src = [ckpt.src_tokenizer.encode(t).ids for t in texts]
        batch = make_batch(src, rows, cfg, ckpt.device, add_eos=False)
    _check_size(ckpt, batch)
    before = _run(ckpt, batch, batch.src_pad, (), recompute, prompts)
    after_pad = batch.src_pad if blocked is None else batch.src_pad | blocked
    after = _run(ckpt, batch, after_pad, edits, recompute, prompts)
    return MaskExperiment(name, texts, before, after, refs, reference, rows)


def experiment_memory(cfg, batch_size: int, src_len: int, tgt_len: int) -> int:
    """Peak bytes of a mask experiment's two recorded runs (:func:`attnviz.analysis.labsize.
    lab_memory`: each run's ``[B, T, V]`` scores, three copies at the peak, and its recorded
    attention; a vocabulary of 262,144 on 700 tokens is gigabytes)."""
    return lab_memory(cfg, batch_size, src_len, tgt_len, runs=2)


def _check_size(ckpt: Checkpoint, batch) -> None:
    """Refuse, in one line, an experiment its process cannot hold (before anything runs)."""
    b, tt = batch.tgt_in.shape if batch.tgt_in is not None else batch.src.shape
    needed = experiment_memory(ckpt.config, b, batch.src.shape[-1], tt)
    refuse_oversized("mask experiment", ckpt.config, needed, tt)


def causal_experiment(
    ckpt: Checkpoint, texts: Sequence[str], targets: Sequence[str] | None = None
) -> MaskExperiment:
    """The decoder's causal mask off, teacher-forced on ``targets`` (default: the task's
    correct outputs) and in greedy decoding (prefix recomputed each step)."""
    return experiment("causal mask off", ckpt, texts, targets, [DropMask("causal")], recompute=True)


def padding_experiment(
    ckpt: Checkpoint, texts: Sequence[str], targets: Sequence[str] | None = None
) -> MaskExperiment:
    """The padding masks off (every kind and layer) on one padded batch of ``texts``."""
    lengths = {len(ckpt.src_tokenizer.split(t)) for t in texts}
    if len(lengths) < 2:
        raise InputError("give inputs of different lengths, so the batch has padding to unmask")
    return experiment("padding mask off", ckpt, texts, targets, [DropMask("padding")])


def _blocked(ckpt: Checkpoint, n: int, positions: Sequence[int], rows: int = 1) -> torch.Tensor:
    """``[rows, n]`` bool with ``positions`` of row 0 True; positions checked against ``n``."""
    bad = [p for p in positions if not isinstance(p, int) or not 0 <= p < n]
    if bad or not positions:
        raise InputError(f"choose source positions in 0..{n - 1} to block, got {list(positions)}")
    blocked = torch.zeros(rows, n, dtype=torch.bool, device=ckpt.device)
    blocked[0, list(positions)] = True
    return blocked


def block_source(
    ckpt: Checkpoint, text: str, positions: Sequence[int], target: str | None = None
) -> MaskExperiment:
    """Block source ``positions`` (0-based) of ``text`` from every attention, as if padding."""
    blocked = _blocked(ckpt, len(ckpt.encode_source(text).ids), positions)
    name = f"source positions {', '.join(map(str, positions))} blocked"
    return experiment(name, ckpt, [text], None if target is None else [target], blocked=blocked)


# -- the mask lab -------------------------------------------------------------------------------
def companion_input(ckpt: Checkpoint, text: str) -> str:
    """A second input of another length, so a batch with ``text`` has padding to unmask.

    For a built-in task: a test-split input 4 tokens longer (shorter at the task's longest
    length); otherwise ``text`` twice, or its first half when twice would be too long.
    """
    n = len(ckpt.src_tokenizer.split(text))
    task = get_task(ckpt.task) if ckpt.task in TASKS else None
    if task is not None:
        longest = task.lengths.stop - 1
        length = min(n + 4, longest) if n < longest else max(task.lengths.start, n - 4)
        if length != n:
            return task.examples("test", 1, seed=3, length=length)[0].src
    sep = " " if ckpt.src_tokenizer.kind == "word" else ""
    pieces = ckpt.src_tokenizer.split(text)
    if 2 * n <= ckpt.config.max_len:
        return sep.join(pieces + pieces)
    return sep.join(pieces[: max(1, n // 2)])


@dataclass
class MaskLab:
    """One input and a companion input run as a padded batch, masks as trained vs changed.

    Attributes:
        texts: ``[input, companion]``.
        blocked: source positions of the input blocked in the "after" run.
        row: the batch row worth showing: the companion when the padding mask is off and it
            is the padded row, else the input (0).
        src_pieces / tgt_pieces: per row, the source pieces and the decoder input's pieces
            (start token, then the reference without its last token), unpadded.
    """

    texts: list[str]
    causal_off: bool
    padding_off: bool
    blocked: list[int]
    experiment: MaskExperiment
    row: int
    src_pieces: list[list[str]]
    tgt_pieces: list[list[str]]

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """(key labels, query labels) of :attr:`row` for ``kind``, padded with ``<pad>``."""
        trace = self.experiment.before.trace
        if ("cross", 0) not in trace.keys():  # decoder-only: prompt + reference on both axes
            tt = trace.weights("decoder_self", 0).shape[-1]
            seq = self.tgt_pieces[self.row] + ["<pad>"] * (tt - len(self.tgt_pieces[self.row]))
            return seq, seq
        ts, tt = trace.weights("cross", 0).shape[-1], trace.weights("cross", 0).shape[-2]
        src = self.src_pieces[self.row] + ["<pad>"] * (ts - len(self.src_pieces[self.row]))
        tgt = self.tgt_pieces[self.row] + ["<pad>"] * (tt - len(self.tgt_pieces[self.row]))
        return {"encoder_self": (src, src), "decoder_self": (tgt, tgt), "cross": (src, tgt)}[kind]

    def view(self, which: str, kind: str, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Weights and blocked cells of :attr:`row` in the ``"before"`` or ``"after"`` run.

        Returns:
            ``([H, Tq, Tk] weights, [Tq, Tk] bool)``: the recorded mask of that run, with the
            padded query rows (a padded batch's filler rows, never read) marked blocked too.
        """
        run = {"before": self.experiment.before, "after": self.experiment.after}[which]
        w = run.trace.numpy(kind, layer)[self.row]  # [H, Tq, Tk]
        mask = np.broadcast_to(run.trace.numpy(kind, layer, "mask")[self.row, 0], w.shape[1:])
        _, queries = self.labels(kind)
        real_q = (
            len(self.tgt_pieces[self.row])
            if kind != "encoder_self"
            else len(self.src_pieces[self.row])
        )
        padded = np.arange(len(queries)) >= real_q  # [Tq]
        return w, mask.astype(bool) | padded[:, None]

    @property
    def padded_rows(self) -> bool:
        """Whether the shown row is shorter than the batch (it has filler rows and columns)."""
        trace = self.experiment.before.trace
        if ("cross", 0) not in trace.keys():  # decoder-only: [B, H, T, T]
            return len(self.tgt_pieces[self.row]) != trace.weights("decoder_self", 0).shape[-1]
        w = trace.weights("cross", 0)  # [B, H, Tt, Ts]
        return (len(self.tgt_pieces[self.row]), len(self.src_pieces[self.row])) != tuple(
            w.shape[2:]
        )


def mask_lab(
    ckpt: Checkpoint,
    text: str,
    *,
    causal_off: bool = False,
    padding_off: bool = False,
    block: Sequence[int] = (),
    companion: str | None = None,
    targets: Sequence[str] | None = None,
    window_off: Sequence[int] = (),
) -> MaskLab:
    """Change masks on ``text`` and a companion input, in one before/after run of the model.

    Args:
        causal_off: drop the decoder's causal mask (greedy output recomputed without a cache).
        padding_off: drop every padding mask; the companion input (another length, see
            :func:`companion_input`) puts padding in the batch.
        block: source positions of ``text`` to block from every attention, as if padding.
        companion: the second input (default :func:`companion_input`).
        targets: references for ``[text, companion]`` (default: see :func:`references`).
        window_off: local layers whose sliding window is dropped (Gemma 3, Mistral; the
            causal mask kept): ``DropMask("sliding", layers=window_off)``.
    Returns:
        A :class:`MaskLab`; its ``experiment`` holds both traces, probabilities, accuracy
        and greedy outputs.
    """
    enc = ckpt.encode_source(text)
    companion = companion_input(ckpt, text) if companion is None else companion
    texts = [text, companion]
    src_pieces = [enc.pieces, ckpt.encode_source(companion).pieces]
    width = max(len(p) for p in src_pieces)
    positions = [int(p) for p in block]
    blocked = None
    if positions:
        blocked = torch.zeros(2, width, dtype=torch.bool, device=ckpt.device)
        blocked[:1, : len(enc.ids)] = _blocked(ckpt, len(enc.ids), positions)
    edits = [DropMask("causal")] * causal_off + [DropMask("padding")] * padding_off
    parts = [n for n, on in (("causal", causal_off), ("padding", padding_off)) if on]
    window_off = sorted({int(i) for i in window_off})
    if window_off:
        edits.append(DropMask("sliding", layers=window_off))
        parts.append(f"sliding window off on layer{'s' * (len(window_off) > 1)} "
                     f"{', '.join(map(str, window_off))}")  # fmt: skip
    parts += [f"source positions {', '.join(map(str, positions))} blocked"] if positions else []
    name = "mask lab: " + ("; ".join(parts) if parts else "no change")
    exp = experiment(name, ckpt, texts, targets, edits, blocked=blocked, recompute=causal_off)
    tok = ckpt.tgt_tokenizer
    if ckpt.config.decoder_only:  # the sequence read: prompt, then the reference
        tgt_pieces = [
            [*src, *(tok.token(i) for i in with_eos(row, ckpt.config.eos_id)[:-1])]
            for src, row in zip(src_pieces, exp.target_ids, strict=True)
        ]
    else:
        start = tok.token(ckpt.config.bos_id)
        tgt_pieces = [[start, *(tok.token(i) for i in tok.encode(t).ids)] for t in exp.targets]
    row = 1 if padding_off and len(src_pieces[0]) == width and len(src_pieces[1]) < width else 0
    return MaskLab(texts, causal_off, padding_off, positions, exp, row, src_pieces, tgt_pieces)
