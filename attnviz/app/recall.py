"""An encoder trace that keeps each layer's input instead of its attention weights.

A Whisper clip is 1,500 encoder frames: its recorded self-attention is 1,500 x 1,500 weights
per head (216 MB of float32 for tiny.en's 4 layers of 6 heads), while what produced them is
each encoder layer's input, ``[1, 1500, 384]`` (2.3 MB a layer). :class:`RecalledEncoder`
keeps those inputs and the encoder's output (the memory the decoder reads) and answers a
request for a layer's weights by running that same layer again on its kept input, with the
recorder on: the same module, the same input, the same recording path the decode took, so the
weights are the ones the model used, bit for bit (``tests/integration/test_speech_memory.py``
holds them equal to a trace recorded in full).

:func:`encode_keeping_inputs` builds a stepper whose encoder pass keeps only that: the taps
of :func:`attnviz.core.layers.tap` give each layer's input, and the pass still takes the
explicit, recording attention path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from ..core.record import AttentionRecord, Trace, record
from ..decode.greedy import GreedyStepper, eval_no_grad

KIND = "encoder_self"
#: What the stepper's encoder pass records: a field that costs nothing for an encoder without
#: a sliding window, so that the pass takes the recording attention path (the weights are
#: then recomputed by that path) while keeping none of its 1,500 x 1,500 matrices.
CHEAP_CAPTURE = ("window",)


class RecalledEncoder(Trace):
    """The encoder part of a trace (``"encoder_self"``, every layer) recomputed on demand.

    Args:
        model: the Transformer whose encoder ran (never modified; skipped when sizing).
        inputs: each encoder layer's input ``[1, Ts, D]``, as the recorded pass fed it.
        memory: the encoder's output ``[1, Ts, D]`` (what the decoder attends to).
        pad: the source padding mask ``[1, Ts]`` the pass used (None for audio).
        edits: the edits the pass ran under (re-applied to every recomputation).
        capture: what a recomputed record holds (the app's: mask and weights).

    Attributes:
        recomputed: how many layer passes were run again (for tests and measurements).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        inputs: Sequence[Tensor],
        memory: Tensor,
        pad: Tensor | None = None,
        edits: Sequence = (),
        capture: Sequence[str] = ("mask", "weights"),
    ):
        super().__init__()
        self.model = model
        self.inputs = list(inputs)
        self.memory = memory
        self.pad = pad
        self.edits = tuple(edits)
        self.capture = tuple(capture)
        self.recomputed = 0
        self.kept: tuple[int, AttentionRecord] | None = None  # the last layer, for one request

    # -- what the trace holds: every encoder layer, one call each ------------------------------
    def keys(self) -> list[tuple[str, int]]:
        return [(KIND, i) for i in range(len(self.inputs))]

    def kinds(self) -> list[str]:
        return [KIND] if self.inputs else []

    def layers(self, kind: str) -> list[int]:
        return list(range(len(self.inputs))) if kind == KIND else []

    def n_calls(self, kind: str, layer: int) -> int:
        return int((kind, layer) in self)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __len__(self) -> int:
        return len(self.inputs)

    def get(self, kind: str, layer: int, call: int = -1) -> AttentionRecord:
        """Layer ``layer``'s record, recomputed from its kept input (the last one asked for is
        kept until :meth:`release`, so reading its weights then its mask runs it once)."""
        if (kind, layer) not in self or call not in (0, -1):
            return super().get(kind, layer, call)  # the trace's own one-line error
        if self.kept is not None and self.kept[0] == layer:
            return self.kept[1]
        rec = self.recompute(layer)
        self.kept = (layer, rec)
        return rec

    def recompute(self, layer: int) -> AttentionRecord:
        """Run encoder layer ``layer`` again on its kept input with the recorder on.

        Returns:
            its :class:`~attnviz.core.record.AttentionRecord` (weights ``[1, H, Ts, Ts]``,
            mask ``[1, 1, Ts, Ts]``).
        """
        x = self.inputs[layer]  # [1, Ts, D]
        encoder, t = self.model.encoder, x.shape[1]
        with eval_no_grad(self.model), record(self.model, self.edits, capture=self.capture) as tr:
            encoder.layers[layer](x, self.pad, encoder.bias(t, t), encoder.rotary(0, t, x))
        self.recomputed += 1
        return tr.get(KIND, layer)

    def release(self) -> None:
        """Drop the layer kept for the last request (the session then holds only inputs)."""
        self.kept = None


def encode_keeping_inputs(
    build: Callable[[Sequence[str]], GreedyStepper], model, capture: Sequence[str]
) -> GreedyStepper:
    """A stepper whose encoder trace is a :class:`RecalledEncoder`.

    Args:
        build: makes the stepper given the capture its encoder pass records under.
        model: the stepper's Transformer (an encoder-decoder).
        capture: what the stepper's decoder steps, and each recomputed encoder layer, record.
    Returns:
        the stepper, its ``encoder_trace`` replaced; the encoder ran once.
    """
    with record(model, capture=(), streams=True) as taps:
        stepper = build(CHEAP_CAPTURE)
    stepper.capture = tuple(capture)  # the steps record as asked from here on
    n = len(model.encoder.layers)
    inputs = [taps.stream("encoder", i, "resid_pre") for i in range(n)]  # each [1, Ts, D]
    with eval_no_grad(model):
        memory = model.encoder.finish(taps.stream("encoder", n - 1, "resid_post"))  # [1, Ts, D]
    stepper.encoder_trace = RecalledEncoder(model, inputs, memory, None, stepper.edits, capture)
    return stepper
