"""Example inputs offered for a model: ``assets/examples.json`` and the task's test split for a
built-in task (a masked-LM model's with their answers masked), else the dev sources a corpus
run stored beside its checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

from ..analysis.masked_lm import task_input
from ..data.tasks import TASKS, get_task
from ..train.evaluate import dev_pairs


def examples_for(task: str | None, n: int = 6) -> list[str]:
    """Example inputs for a task: ``assets/examples.json`` first, then the task's test split."""
    out: list[str] = []
    file = Path(__file__).resolve().parents[2] / "assets" / "examples.json"
    if task and file.is_file():
        try:
            out = [str(x) for x in json.loads(file.read_text()).get(task, [])]
        except (json.JSONDecodeError, AttributeError):
            out = []
    if task in TASKS and len(out) < n:
        out += [e.src for e in get_task(task).examples("test", n - len(out), seed=1)]
    return list(dict.fromkeys(out))[:n]


#: Prompts for a language model read from a GGUF file, each showing something real: a fact,
#: a repeated random sequence (induction heads copy its second half), code, and a prompt
#: longer than a 512-token sliding window (a local layer cannot see its start).
LLM_PROMPTS = (
    "The capital of France is",
    "kettle violin orbit walnut cactus harbor; kettle violin orbit walnut cactus harbor; kettle",
    "def fibonacci(n):",
    "Rome was not built in a day. " * 90 + "Rome was not built",
)


def examples_of(ckpt, n: int = 6) -> list[str]:
    """Example inputs for a checkpoint: its task's (:func:`examples_for`), else the first
    distinct sources of the dev pairs a corpus run stored beside it, else (a language model
    from a GGUF file) :data:`LLM_PROMPTS`, else none."""
    out = examples_for(ckpt.task, n)
    if out and ckpt.masked_lm:  # the answer masked, as the model was trained to read
        task = get_task(ckpt.task)
        out = [task_input(ckpt, s, task.target(s)) for s in out]
    if not out:
        out = list(dict.fromkeys(s for s, _ in dev_pairs(ckpt) if s.strip()))
    if not out and ckpt.meta.get("format") == "gguf":
        out = list(LLM_PROMPTS)
    return out[:n]
