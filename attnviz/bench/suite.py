"""The benchmark suite behind ``attnviz bench``: ratios measured side by side in one process.

Each row times two things (ours and a baseline) in the same run, warm-up excluded, median of
repeats, so the ratio carries between machines even where absolute times do not. Targets:

1. train step vs a ``torch.nn.Transformer`` model of the same size: ratio <= 1.00;
2. inference forward, same comparison: <= 1.00;
3. forward with full recording vs without: <= 1.5;
4. cached greedy decoding vs re-running the decoder on the whole prefix, best of three with
   the three loops interleaved: the cached step module by module (the path that records; the
   "before") and fused into one function (:mod:`attnviz.core.step`, the "after"): >= 6x faster;
   the recording stepper's step time at the end / near the start <= 1.5 (flat);
5. beam search (beam 4, 64 tokens): time per token, module by module (the path that records)
   and with the fused step, interleaved: the fused one faster;
6. the app (:mod:`attnviz.bench.app`): one Step on the server (decode, the rows, the page's
   payload): <= 100 ms, and the payload sent per step < 200 KB; in headless Chromium
   (Playwright, the system Chromium), the time from a click to the redrawn page for Step,
   Back, scrub and a layer/head change, and the bytes the page receives per Step, on
   models/reverse and an opus-mt-shaped random model;
7. bytes held by a Trace of a 6+6-layer, d_model 512, 8-head model on 256 + 256 tokens;
8. ``--full`` only (minutes): wall time of ``attnviz train --task reverse`` to 99 % validation
   exact match, measured in the run (a number read from a saved history is not a measurement);
9. a Hugging Face opus-mt-shaped Marian model (random weights, ``save_pretrained``, opened
   with :func:`attnviz.load_checkpoint`): one recorded ``GreedyStepper`` step vs one step of
   transformers' cached greedy ``generate`` on the same model and input: <= 1.2;
10. a GPT-2-shaped decoder-only model (:mod:`attnviz.bench.kinds`) on a 200-token prompt:
   the recording stepper per token vs transformers' cached greedy ``generate``: <= 1.0.
"""

from __future__ import annotations

import contextlib
import math
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict

import torch
from torch import nn

from ..core.config import ModelConfig
from ..core.masks import causal_mask
from ..core.model import Transformer, sinusoidal_positions
from ..core.record import record
from ..decode.batched import greedy_decode
from ..decode.beam import beam_search
from ..decode.greedy import GreedyStepper
from .rows import (  # noqa: F401  (re-exported)
    CHROMIUM,
    CHROMIUM_ARGS,
    MODELS,
    Row,
    app_threads,
    paired_times,
    save_quietly,
)


def median_time(fn: Callable[[], object], repeats: int, warmup: int = 2) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


class TorchBaseline(nn.Module):
    """Embeddings + sinusoidal positions + ``nn.Transformer(batch_first=True)`` + Linear."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d = cfg.d_model
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        self.register_buffer("pe", sinusoidal_positions(cfg.max_len, cfg.d_model), persistent=False)
        self.core = nn.Transformer(
            cfg.d_model, cfg.n_heads, cfg.n_encoder_layers, cfg.n_decoder_layers, cfg.d_ff,
            cfg.dropout, batch_first=True,
        )  # fmt: skip
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size)

    def forward(self, src, tgt, src_pad, tgt_pad):
        s = self.src_embed(src) * math.sqrt(self.d) + self.pe[: src.shape[1]]
        t = self.tgt_embed(tgt) * math.sqrt(self.d) + self.pe[: tgt.shape[1]]
        causal = causal_mask(tgt.shape[1], tgt.shape[1], tgt.device)
        h = self.core(s, t, tgt_mask=causal, src_key_padding_mask=src_pad,
                      tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)  # fmt: skip
        return self.generator(h)


def _amp(device: torch.device):
    """bf16 autocast on CUDA (as training uses it), nothing on CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16, enabled=torch.device(device).type == "cuda")


def _batch(cfg: ModelConfig, b: int, t: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, cfg.src_vocab_size, (b, t), generator=g)
    tgt = torch.randint(4, cfg.tgt_vocab_size, (b, t + 1), generator=g)
    lengths = torch.randint(t // 2, t + 1, (b,), generator=g)
    pos = torch.arange(t)
    src[pos[None, :] >= lengths[:, None]] = 0  # padded batches
    tgt[torch.arange(t + 1)[None, :] > lengths[:, None]] = 0
    return src.to(device), tgt.to(device)


def bench_model_vs_torch(device, quick: bool) -> list[Row]:
    """Rows 1-3: train step and inference forward vs nn.Transformer; recording overhead."""
    cfg = ModelConfig(30, 30, d_model=128, n_heads=4, d_ff=512, dropout=0.1, max_len=64)
    torch.manual_seed(0)
    ours, base = Transformer(cfg).to(device), TorchBaseline(cfg).to(device)
    src, tgt = _batch(cfg, 128, 22, device)
    sp, tp = src == 0, tgt == 0
    reps = 5 if quick else 20
    steps = []
    for model in (ours, base):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def train_step(model=model, opt=opt):
            model.train()
            with _amp(device):
                loss = model(src, tgt, sp, tp).float().logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()

        steps.append(train_step)
    times = paired_times(*steps, reps)
    rows_out = [Row("train step vs nn.Transformer", times[0] / times[1], "ratio", "<= 1.00",
                    times[0] / times[1] <= 1.0, f"{times[0] * 1e3:.1f} ms vs {times[1] * 1e3:.1f} ms")]  # fmt: skip
    ours.eval()
    base.eval()
    with torch.no_grad(), _amp(device):
        t_ours, t_base = paired_times(
            lambda: ours(src, tgt, sp, tp), lambda: base(src, tgt, sp, tp), reps * 2
        )

        def recorded():
            with record(ours):
                ours(src, tgt, sp, tp)

        t_rec, t_plain = paired_times(recorded, lambda: ours(src, tgt, sp, tp), reps * 2)
    rows_out.append(Row("inference forward vs nn.Transformer", t_ours / t_base, "ratio", "<= 1.00",
                        t_ours / t_base <= 1.0, f"{t_ours * 1e3:.1f} ms vs {t_base * 1e3:.1f} ms"))  # fmt: skip
    rows_out.append(Row("forward with recording / without", t_rec / t_plain, "ratio", "<= 1.5",
                        t_rec / t_plain <= 1.5, f"{t_rec * 1e3:.1f} ms vs {t_plain * 1e3:.1f} ms"))  # fmt: skip
    return rows_out


def _naive_greedy(model: Transformer, src, n: int):
    """The tutorial loop: re-run the decoder on the whole prefix at every step."""
    memory = model.encode(src)
    ys = torch.ones(src.shape[0], 1, dtype=torch.long, device=src.device)
    for _ in range(n):
        nxt = model.decode(ys, memory)[:, -1].argmax(-1, keepdim=True)
        ys = torch.cat([ys, nxt], 1)
    return ys


def best_times(fns: dict[str, Callable[[], object]], repeats: int = 3) -> dict[str, float]:
    """Best seconds of each function over ``repeats`` rounds, run in turn within each round so
    load from other processes hits all of them alike (one warm-up round first)."""
    best = dict.fromkeys(fns, math.inf)
    for round_ in range(repeats + 1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if round_:
                best[name] = min(best[name], time.perf_counter() - t0)
    return best


def bench_decoding(device, quick: bool) -> list[Row]:
    """Rows 4-5: cached greedy (module by module, and fused) vs the naive loop; flatness of the
    step time; beam search."""
    n = 64 if quick else 256
    cfg = ModelConfig(30, 30, d_model=128, n_heads=4, d_ff=512, dropout=0.0, max_len=n + 8)
    torch.manual_seed(0)
    model = Transformer(cfg).to(device).eval()
    src = torch.randint(4, 30, (1, 20), device=device)
    with torch.no_grad():
        t = best_times(
            {
                "naive": lambda: _naive_greedy(model, src, n),
                "modules": lambda: greedy_decode(model, src, 1, None, max_len=n, fused=False),
                "fused": lambda: greedy_decode(model, src, 1, None, max_len=n),
            }
        )
    naive, before, cached = t["naive"], t["modules"], t["fused"]
    stepper = GreedyStepper(model, src[0], 1, None, max_len=n)
    step_times = []
    for _ in range(n):
        t0 = time.perf_counter()
        stepper.step()
        step_times.append(time.perf_counter() - t0)
    early = statistics.median(step_times[8:24])
    late = statistics.median(step_times[-16:])
    with torch.no_grad():
        b = best_times(
            {
                "modules": lambda: beam_search(model, src, 1, None, 4, 64, fused=False),
                "fused": lambda: beam_search(model, src, 1, None, 4, 64),
            },
            2 if quick else 5,
        )
        same = [
            [h.tokens for h in beam_search(model, src, 1, None, 4, 64, fused=f)[0].hypotheses]
            for f in (False, True)
        ]
    beam_before, beam_after = b["modules"] / 64 * 1e3, b["fused"] / 64 * 1e3
    agree = "same hypotheses" if same[0] == same[1] else "OTHER hypotheses than module by module"
    return [
        Row(f"greedy {n} tokens: naive loop / cached, module by module (before)", naive / before,
            "x faster", "-", None, f"{before * 1e3:.0f} ms vs {naive * 1e3:.0f} ms, best of 3"),
        Row(f"greedy {n} tokens: naive loop / cached, fused step (after)", naive / cached,
            "x faster", ">= 6", naive / cached >= 6,
            f"{cached * 1e3:.0f} ms vs {naive * 1e3:.0f} ms, best of 3, interleaved with the "
            f"row above ({cached / n * 1e3:.2f} vs {before / n * 1e3:.2f} ms per token)"),
        Row(f"step time at step ~{n} / at ~16", late / early, "ratio", "<= 1.5", late / early <= 1.5,
            f"{late * 1e3:.2f} ms vs {early * 1e3:.2f} ms per step"),
        Row("beam search (beam 4, 64 tokens) per token, module by module (before)",
            beam_before, "ms", "-", None, f"best of {2 if quick else 5}, interleaved with the row below"),
        Row("beam search (beam 4, 64 tokens) per token, fused step (after)", beam_after, "ms",
            "< before", beam_after < beam_before and same[0] == same[1],
            f"{beam_before / beam_after:.2f}x faster than module by module, {agree}"),
    ]  # fmt: skip


def _trace_bytes(trace, fields) -> int:
    return sum(
        getattr(trace.get(*key), f).numel() * getattr(trace.get(*key), f).element_size()
        for key in trace.keys()
        for f in fields
    )


def bench_memory(device, quick: bool) -> list[Row]:
    """Row 7: bytes held by a full trace of a large model, as computed and in float16."""
    n = 64 if quick else 256
    cfg = ModelConfig(30, 30, d_model=512, n_heads=8, n_encoder_layers=6, n_decoder_layers=6,
                      d_ff=2048, dropout=0.0, max_len=n + 8)  # fmt: skip
    model = Transformer(cfg).to(device).eval()
    src = torch.randint(4, 30, (1, n), device=device)
    tgt = torch.randint(4, 30, (1, n), device=device)
    fields = ("scores", "mask", "weights", "values", "head_output")
    sizes = {}
    for dtype in (None, torch.float16):
        with torch.no_grad(), record(model, dtype=dtype) as trace:
            model(src, tgt)
        sizes[dtype] = (_trace_bytes(trace, fields), _trace_bytes(trace, ("weights",)))
    (full, w), (half, w_half) = sizes[None], sizes[torch.float16]
    name = f"trace of 6+6 layers, d512, 8 heads, {n}+{n} tokens"
    return [
        Row(name, full / 2**20, "MB", "-", None, f"weights only {w / 2**20:.0f} MB"),
        Row(f"{name}, float16 storage", half / 2**20, "MB", "-", None,
            f"weights only {w_half / 2**20:.0f} MB (record(model, dtype=torch.float16))"),
    ]  # fmt: skip


HF_ROW = "HF Marian (opus-mt shape) recorded step vs transformers' cached greedy step"


def bench_hf_marian(quick: bool) -> list[Row]:
    """Row 9: a recorded stepper step on an opus-mt-shaped Marian folder vs ``generate``."""
    try:
        import transformers
    except ImportError:
        return [Row(HF_ROW, float("nan"), "ratio", "<= 1.2", None,
                    "skipped: transformers is not installed (pip install 'attnviz[hf]')")]  # fmt: skip
    import tempfile

    from ..checkpoint import load_checkpoint

    n, reps = (8, 3) if quick else (32, 7)
    vocab = 8000
    cfg = transformers.MarianConfig(
        vocab_size=vocab, d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
        decoder_ffn_dim=2048, max_position_embeddings=512, pad_token_id=vocab - 1,
        decoder_start_token_id=vocab - 1, eos_token_id=0, forced_eos_token_id=0,
        scale_embedding=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(cfg).eval()
    with torch.no_grad():  # random weights rarely pick EOS, but never let it end a run early
        hf.final_logits_bias[..., 0] = -1e4
    hf.generation_config.bad_words_ids = [[vocab - 1]]  # what opus-mt folders carry
    src = torch.randint(1, vocab - 1, (1, 20))
    with tempfile.TemporaryDirectory(prefix="attnviz-bench-hf-") as tmp, app_threads():
        save_quietly(hf, tmp)
        ckpt = load_checkpoint(tmp)
        c = ckpt.config

        def ours():
            stepper = GreedyStepper(
                ckpt.model, src[0], c.bos_id, c.eos_id, max_len=n + 2, rules=ckpt.rules
            )
            for _ in range(n):
                stepper.step()
            return stepper.tokens

        def theirs():
            with torch.no_grad():
                return hf.generate(
                    input_ids=src, attention_mask=torch.ones_like(src), max_new_tokens=n,
                    min_new_tokens=n, num_beams=1, do_sample=False,
                )  # fmt: skip

        # generate forces EOS as its last token (the folder's forced_eos_token_id)
        same = ours()[: n - 1] == theirs()[0, 1:n].tolist()
        t_ours, t_base = paired_times(ours, theirs, reps, 1)
    t_ours, t_base = t_ours / n, t_base / n
    return [Row(HF_ROW, t_ours / t_base, "ratio", "<= 1.2", t_ours / t_base <= 1.2,
                f"{t_ours * 1e3:.1f} ms vs {t_base * 1e3:.1f} ms per token, {n} tokens from a "
                f"20-token input, encoder included{'' if same else ', tokens differ'}")]  # fmt: skip


TRAIN_ROW = "train reverse to 99% val exact match"


def bench_training(device: torch.device, full: bool, **options) -> list[Row]:
    """Row 8 (``--full`` only: it takes minutes): wall time of ``attnviz train --task reverse``,
    the shipped model's command, until validation exact match reaches 0.99, measured now.

    Args:
        options: :class:`~attnviz.train.loop.TrainOptions` fields over the task's defaults.
    """
    if not full:
        return []
    import io
    import tempfile

    from ..train.loop import TrainOptions, train

    with tempfile.TemporaryDirectory(prefix="attnviz-bench-train-") as tmp:
        opts = TrainOptions(**{"task": "reverse", "out": tmp, "target_exact_match": 0.99,
                               "device": str(device), **options})  # fmt: skip
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # the run's validation lines
            m = train(opts, progress=False)
        wall = time.perf_counter() - t0
    reached = m["val_exact_match"] >= 0.99
    detail = (f"measured: step {m['step']}, exact match {m['val_exact_match']:.3f}, "
              f"{torch.get_num_threads()} threads, tokenizers and validations included")  # fmt: skip
    if not reached:
        detail = f"did not reach 0.99 in {m['step']} steps; " + detail
    return [Row(TRAIN_ROW, wall, "s", "<= 300", reached and wall <= 300, detail)]


def run(
    device: str = "auto", quick: bool = False, progress: bool = True, full: bool = False
) -> dict:
    """Run every row; returns ``{"machine": ..., "rows": [Row as dict, ...]}``.

    ``full`` adds the rows that take minutes (training reverse to 99 % exact match).
    """
    from tqdm import tqdm

    from ..core.devices import resolve_device
    from . import (
        app,  # the app's rows (Step on the server, the browser)
        gguf,  # the real Gemma 3 270M GGUF against transformers (and llama.cpp)
        kinds,  # a GPT-2-shaped decoder-only model against transformers
        sentence,  # all-MiniLM-L6-v2 embed against sentence-transformers
        speech,  # Whisper tiny.en against ctranslate2
    )
    from .report import bench_report  # the offline report: canvas page vs Plotly page

    dev = resolve_device(device)  # "cuda" without a GPU: one clear error
    parts = [
        ("model vs nn.Transformer", lambda: bench_model_vs_torch(dev, quick)),
        ("decoding", lambda: bench_decoding(dev, quick)),
        ("app", lambda: app.bench_app(quick)),
        ("app memory", lambda: app.bench_app_memory(quick)),  # before the big trace: its RSS
        ("browser", lambda: app.bench_browser(quick)),
        ("report", lambda: bench_report(quick)),
        ("memory", lambda: bench_memory(dev, quick)),
        ("hf marian", lambda: bench_hf_marian(quick)),
        ("hf gpt-2", lambda: kinds.bench_hf_gpt2(quick)),
        ("gguf gemma 3", lambda: gguf.bench_gemma(quick)),
        ("sentence embeddings", lambda: sentence.bench_sentence(quick)),
        ("speech", lambda: speech.bench_speech(quick)),
        ("training", lambda: bench_training(dev, full)),
    ]
    rows: list[Row] = []
    for _, part in tqdm(parts, desc="bench", disable=not progress):
        rows += part()
    machine = (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {dev}"
    )
    if dev.type == "cuda":
        machine += f" ({torch.cuda.get_device_name()})"
    return {"machine": machine, "torch": torch.__version__, "quick": quick, "full": full,
            "rows": [asdict(r) for r in rows]}  # fmt: skip


def table(result: dict) -> str:
    """The rows as a Markdown table."""
    lines = [f"machine: {result['machine']}, torch {result['torch']}", "",
             "| benchmark | value | target | met | detail |", "|---|---|---|---|---|"]  # fmt: skip
    for r in result["rows"]:
        met = {True: "yes", False: "**no**", None: "-"}[r["met"]]
        lines.append(
            f"| {r['name']} | {r['value']:.2f} {r['unit']} | {r['target']} | {met} | {r['detail']} |"
        )
    return "\n".join(lines)
