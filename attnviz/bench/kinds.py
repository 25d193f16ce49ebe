"""Benchmark rows of the one-stack kinds: a GPT-2-shaped decoder-only model (12 layers,
d_model 768, 12 heads, GPT-2's vocabulary; random weights, ``save_pretrained``, opened with
:func:`attnviz.load_checkpoint`) on a 200-token prompt: the recording ``GreedyStepper``'s time
per token against transformers' cached greedy ``generate`` on the same model and prompt,
timed alternately in one process (target <= 1.0)."""

from __future__ import annotations

import tempfile

import torch

from ..decode.greedy import GreedyStepper
from .rows import Row, app_threads, paired_times, save_quietly

GPT2_ROW = "HF GPT-2 (12 x 768) recorded stepper vs transformers' cached greedy, per token"


def bench_hf_gpt2(quick: bool) -> list[Row]:
    """The GPT-2 row (skipped without transformers)."""
    try:
        import transformers
    except ImportError:
        return [Row(GPT2_ROW, float("nan"), "ratio", "<= 1.0", None,
                    "skipped: transformers is not installed (pip install 'attnviz[hf]')")]  # fmt: skip
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

        def ours() -> list[int]:
            stepper = GreedyStepper(ckpt.model, prompt[0], None, None, max_len=n)
            for _ in range(n):
                stepper.step()
            return stepper.tokens

        def theirs() -> torch.Tensor:
            with torch.no_grad():
                return hf.generate(
                    input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                    min_new_tokens=n, num_beams=1, do_sample=False, pad_token_id=cfg.eos_token_id,
                )  # fmt: skip

        same = ours() == theirs()[0, prompt_len:].tolist()
        t_ours, t_base = paired_times(ours, theirs, reps, 1)
    t_ours, t_base = t_ours / n, t_base / n
    ratio = t_ours / t_base
    return [Row(GPT2_ROW, ratio, "ratio", "<= 1.0", ratio <= 1.0,
                f"{t_ours * 1e3:.1f} ms vs {t_base * 1e3:.1f} ms per token, {n} tokens after a "
                f"{prompt_len}-token prompt, the prompt's pass included, every step's attention "
                f"recorded{'' if same else ', tokens differ'}")]  # fmt: skip
