"""Benchmark rows of the one-stack kinds: a GPT-2-shaped decoder-only model (12 layers,
d_model 768, 12 heads, GPT-2's vocabulary; random weights, ``save_pretrained``, opened with
:func:`attnviz.load_checkpoint`) on a 200-token prompt: the recording ``GreedyStepper``'s time
per token, as the app runs it (with the weight copies it keeps per loaded model,
:func:`attnviz.app.decoders.copies_of`), against transformers' cached greedy ``generate`` on
the same model and prompt, timed alternately in one process (target <= 1.0); the same against
``generate(output_attentions=True)``, what returns every step's attention in transformers
(eager attention); and the library's stepper as a notebook makes it (no copies)."""

from __future__ import annotations

import tempfile

import torch

from ..core.gemv import Copies
from ..decode.greedy import GreedyStepper
from .rows import Row, app_threads, no_progress_bars, paired_times, save_quietly

GPT2_ROW = "HF GPT-2 (12 x 768) recorded stepper vs transformers' cached greedy, per token"
GPT2_ATTN_ROW = (
    "HF GPT-2 (12 x 768) recorded stepper vs generate(output_attentions=True), per token"
)
GPT2_PLAIN_ROW = (
    "HF GPT-2 (12 x 768) recorded stepper without weight copies vs cached greedy, per token"
)
ROWS = (GPT2_ROW, GPT2_ATTN_ROW, GPT2_PLAIN_ROW)


def bench_hf_gpt2(quick: bool) -> list[Row]:
    """The GPT-2 row (skipped without transformers)."""
    try:
        import transformers
    except ImportError:
        why = "skipped: transformers is not installed (pip install 'attnviz[hf]')"
        return [Row(r, float("nan"), "ratio", "<= 1.0", None, why) for r in ROWS]
    from ..checkpoint import load_checkpoint

    n, reps, prompt_len = (8, 3, 200) if quick else (32, 5, 200)
    cfg = transformers.GPT2Config(
        n_layer=12, n_embd=768, n_head=12, n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    prompt = torch.randint(0, cfg.vocab_size - 1, (1, prompt_len))
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-gpt2-") as tmp, app_threads():
        save_quietly(hf, tmp)
        ckpt = load_checkpoint(tmp)

        copies = Copies(ckpt.model)  # what the app keeps per loaded model (made once)

        def ours(kept: Copies | None = copies) -> list[int]:
            stepper = GreedyStepper(ckpt.model, prompt[0], None, None, max_len=n, copies=kept)
            for _ in range(n):
                stepper.step()
            return stepper.tokens

        def plain() -> list[int]:  # the library's stepper as a notebook makes it
            return ours(None)

        def theirs() -> torch.Tensor:
            with torch.no_grad():
                return hf.generate(
                    input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                    min_new_tokens=n, num_beams=1, do_sample=False, pad_token_id=cfg.eos_token_id,
                )  # fmt: skip

        with no_progress_bars():
            eager = transformers.GPT2LMHeadModel.from_pretrained(tmp, attn_implementation="eager")
        eager.eval()

        def theirs_with_attention():  # what returns every step's attention in transformers
            with torch.no_grad():
                return eager.generate(
                    input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                    min_new_tokens=n, num_beams=1, do_sample=False, pad_token_id=cfg.eos_token_id,
                    output_attentions=True, return_dict_in_generate=True,
                ).sequences  # fmt: skip

        same = ours() == theirs()[0, prompt_len:].tolist()
        same_eager = ours() == theirs_with_attention()[0, prompt_len:].tolist()
        same_plain = plain() == ours()
        t_ours, t_base = paired_times(ours, theirs, reps, 1)
        t_ours2, t_eager = paired_times(ours, theirs_with_attention, reps, 1)
        t_plain, t_base3 = paired_times(plain, theirs, reps, 1)
    rows = []
    for name, mine, base, agree, what, target in (
        (GPT2_ROW, t_ours, t_base, same, "cached greedy generate()", "<= 1.0"),
        (GPT2_ATTN_ROW, t_ours2, t_eager, same_eager, "generate() returning every attention",
         "<= 1.0"),
        (GPT2_PLAIN_ROW, t_plain, t_base3, same and same_plain, "cached greedy generate()", "-"),
    ):  # fmt: skip
        mine, base = mine / n, base / n
        ratio = mine / base
        met = ratio <= 1.0 if target != "-" else None
        rows.append(Row(name, ratio, "ratio", target, met,
                        f"{mine * 1e3:.1f} ms vs {base * 1e3:.1f} ms per token ({what}), {n} "
                        f"tokens after a {prompt_len}-token prompt, the prompt's pass included, "
                        f"every step's attention recorded{'' if agree else ', tokens differ'}"))  # fmt: skip
    return rows
