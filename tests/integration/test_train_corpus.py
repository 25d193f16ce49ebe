"""Training on a parallel corpus: each file format, tokenizers in the checkpoint, held-out dev,
--max-len drops, resume, presets and model flags, progress in a log, the app on the result."""

from __future__ import annotations

import dataclasses
import html
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import attnviz
from attnviz.cli.commands import build_parser, main
from attnviz.core.config import ModelConfig
from attnviz.core.errors import InputError
from attnviz.data.corpus import EncodedCorpus
from attnviz.data.tasks import get_task
from attnviz.data.tokenizer import Tokenizer
from attnviz.train.feeds import PRESETS, CorpusFeed, TaskFeed, corpus_defaults
from attnviz.train.loop import MODEL_FIELDS, TrainOptions, train
from attnviz.train.snapshots import Snapshots

TINY = ["--d-model", "32", "--heads", "2", "--d-ff", "64", "--encoder-layers", "1",
        "--decoder-layers", "1", "--batch-size", "8", "--eval-size", "8",
        "--snapshot-every", "2", "--quiet"]  # fmt: skip
_WORDS = [
    "le",
    "chat",
    "noir",
    "dort",
    "sur",
    "la",
    "table",
    "près",
    "du",
    "grand",
    "arbre",
    "vert",
    "été",
    "où",
    "ça",
]


def _pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Source sentences of accented words; the target is the sentence reversed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choices(_WORDS, k=rng.randint(2, 6))
        out.append((" ".join(words), " ".join(reversed(words)) + "."))
    return out


def _write(folder, fmt: str, pairs) -> list[str]:
    if fmt == "tsv":
        path = folder / "train.tsv"
        path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
        return [str(path)]
    if fmt == "jsonl":
        path = folder / "train.jsonl"
        lines = [json.dumps({"translation": {"fr": s, "rv": t}}) for s, t in pairs]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return [str(path)]
    src, tgt = folder / "train.fr", folder / "train.rv"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return [str(src), str(tgt)]


@pytest.mark.parametrize("fmt", ["tsv", "aligned", "jsonl"])
def test_each_corpus_format_trains_and_loads_back(tmp_path, capsys, fmt):
    pairs = _pairs(300)
    data = _write(tmp_path, fmt, pairs)
    out = tmp_path / "run"
    langs = ["--langs", "fr", "rv"] if fmt == "jsonl" else []
    fallback = fmt == "jsonl"
    argv = ["train", "--data", *data, *langs, "--out", str(out), "--tokenizer", "bpe",
            "--vocab-size", "340" if fallback else "80", *["--byte-fallback"] * fallback,
            "--steps", "4", "--eval-every", "2", *TINY]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "dev: " in printed and "held out" in printed  # no --dev: the slice, said so
    assert "saved " in printed and "chrF" in printed and "BLEU" in printed
    ckpt = attnviz.load_checkpoint(out)
    assert ckpt.task is None and ckpt.meta["kept"]["last_step"] == 4
    assert ckpt.meta["step"] == ckpt.meta["kept"]["step"] in (2, 4)  # the better validation's
    assert ckpt.src_tokenizer.kind == "bpe" and ckpt.meta["options"]["tokenizer"] == "bpe"
    assert ckpt.meta["corpus"]["train_pairs"] + ckpt.meta["corpus"]["dev_pairs"] == len(pairs)
    assert {"val_bleu", "val_chrf"} <= set(ckpt.meta["history"][-1])
    assert isinstance(ckpt.predict(pairs[0][0]), str)
    # the tokenizer saved as JSON round-trips unicode text (unseen characters with byte fallback)
    tok = ckpt.tgt_tokenizer
    for s in ["près du  grand arbre où ça été.", *(["Ünseen, 2024 ✓"] if fallback else [])]:
        assert tok.decode(tok.encode(s).ids) == s
    dev = json.loads((out / "dev_pairs.json").read_text(encoding="utf-8"))["pairs"]
    snaps = Snapshots.load(out)  # the first dev sentence is the probe
    assert snaps.probe_src == ckpt.src_tokenizer.encode(dev[0][0]).pieces
    assert snaps.steps == [0, 2, 4]


def test_training_from_python_takes_the_pairs(tmp_path):
    pairs, dev = _pairs(120), _pairs(10, seed=1)
    opts = TrainOptions(out=str(tmp_path / "py"), tokenizer="char", steps=3, eval_every=3,
                        d_model=32, n_heads=2, d_ff=64, batch_size=8)  # fmt: skip
    metrics = train(opts, progress=False, pairs=pairs, dev_pairs=dev)
    assert metrics["step"] == 3 and metrics["n"] == 10
    ckpt = attnviz.load_checkpoint(tmp_path / "py")
    assert ckpt.src_tokenizer.kind == "char"
    assert ckpt.meta["corpus"]["train"] == "pairs given in Python"
    assert "pairs" not in ckpt.meta["options"]  # the pairs are data, not an option


def test_max_len_drops_long_pairs_and_reports_how_many(tmp_path, capsys):
    pairs = _pairs(100) + [("le " * 30, "chat " * 30)] * 7
    train(
        TrainOptions(
            out=str(tmp_path / "m"),
            tokenizer="word",
            max_len=12,
            steps=2,
            eval_every=2,
            d_model=32,
            n_heads=2,
            d_ff=64,
            batch_size=8,
        ),  # fmt: skip
        progress=False,
        pairs=pairs,
        dev_pairs=_pairs(5, seed=3),
    )
    assert "dropped 7 of 107 training pairs longer than --max-len 12" in capsys.readouterr().out
    ckpt = attnviz.load_checkpoint(tmp_path / "m")
    assert ckpt.config.max_len == 13 and ckpt.meta["corpus"]["dropped"] == 7
    with pytest.raises(InputError, match="no training pair fits"):
        train(TrainOptions(tokenizer="word", max_len=1, steps=1), progress=False, pairs=pairs)


def test_resume_with_data_reads_the_corpus_again(tmp_path):
    data = _write(tmp_path, "tsv", _pairs(200))
    out = str(tmp_path / "run")
    base = ["train", "--data", *data, "--out", out, "--tokenizer", "word", "--eval-every", "3",
            *TINY]  # fmt: skip
    assert main([*base, "--steps", "3"]) == 0
    first = attnviz.load_checkpoint(out)
    assert main(["train", "--out", out, "--resume", "--steps", "6", "--quiet"]) == 0
    ckpt = attnviz.load_checkpoint(out)
    assert [h["step"] for h in ckpt.meta["history"]] == [3, 6]
    assert ckpt.src_tokenizer == first.src_tokenizer  # the saved vocabulary, not a new one
    assert ckpt.meta["options"]["data"] == data
    assert ckpt.meta["corpus"]["pieces"] == first.meta["corpus"]["pieces"]  # as first printed


def test_an_interrupted_corpus_run_resumes_to_the_same_weights(tmp_path):
    import torch

    from attnviz.checkpoint import read_tensors

    pairs, dev = _pairs(150), _pairs(8, seed=2)
    kw = dict(tokenizer="word", steps=8, eval_every=4, d_model=32, n_heads=2, d_ff=64,
              batch_size=8, dropout=0.0)  # fmt: skip
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    train(TrainOptions(out=a, **kw), progress=False, pairs=pairs, dev_pairs=dev)
    train(TrainOptions(out=b, **kw), progress=False, stop_after=3, pairs=pairs, dev_pairs=dev)
    train(TrainOptions(out=b, resume=True), progress=False, pairs=pairs, dev_pairs=dev)
    wa, _ = read_tensors(f"{a}/model.safetensors")
    wb, _ = read_tensors(f"{b}/model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_batches_draw_each_pair_once_per_epoch_and_depend_on_rank():
    tok = Tokenizer.from_texts("word", [s for p in _pairs(40) for s in p])
    pairs = _pairs(40)
    feed = CorpusFeed(pairs, pairs[:3], tok, tok, 64, log=lambda _m: None)
    opts = TrainOptions(batch_size=10, seed=0)
    seen = [tuple(r) for step in range(4) for r in feed.batch(step, opts, 0, 1)[0]]
    assert sorted(seen) == sorted(tuple(tok.encode(s).ids) for s, _ in pairs)
    assert feed.batch(1, opts, 0, 2) != feed.batch(1, opts, 1, 2)
    assert feed.batch(5, opts, 0, 1) == feed.batch(5, opts, 0, 1)


def test_task_runs_refuse_corpus_options():
    with pytest.raises(InputError, match="--tokenizer apply to --data"):
        train(TrainOptions(task="copy", tokenizer="bpe"), progress=False)
    with pytest.raises(InputError, match="one of --task or --data"):
        train(TrainOptions(), progress=False)


def test_target_chrf_stops_early(tmp_path, capsys):
    train(TrainOptions(tokenizer="char", steps=50, eval_every=2, target_chrf=0.0, d_model=32,
                       n_heads=2, d_ff=64, batch_size=8),  # fmt: skip
          progress=False, pairs=_pairs(60), dev_pairs=_pairs(4, seed=5))  # fmt: skip
    assert "reached chrF" in capsys.readouterr().out


def test_three_dev_sentences_are_printed_with_the_output(tmp_path, capsys):
    dev = _pairs(5, seed=7)
    train(TrainOptions(tokenizer="word", steps=2, eval_every=2, d_model=32, n_heads=2, d_ff=64,
                       batch_size=8), progress=False, pairs=_pairs(60), dev_pairs=dev)  # fmt: skip
    printed = capsys.readouterr().out
    for src, ref in dev[:3]:
        assert f"  src: {src}\n  ref: {ref}\n  out: " in printed
    assert f"src: {dev[3][0]}" not in printed
    assert "BLEU nrefs:1|case:mixed|eff:no|tok:13a" in printed  # the signature, once
    assert printed.count("nrefs:1") == 2  # BLEU's and chrF's


def test_progress_without_a_terminal_is_a_few_lines(capsys):
    """Under a redirect: no bar redraws, only evaluation lines (and one line per ~30 s)."""
    opts = TrainOptions(task="copy", steps=40, eval_every=20, d_model=32, n_heads=2, d_ff=64,
                        batch_size=8, eval_size=4, snapshot_every=20)  # fmt: skip
    train(opts, progress=True)
    got = capsys.readouterr()
    log = got.out + got.err
    assert "\r" not in log and "it/s" not in log
    assert len(log.encode()) < 3000, log
    assert log.count("step 20: val loss") == 1 and log.count("step 40: val loss") == 1
    train(dataclasses.replace(opts, steps=3, eval_every=3), progress=True, progress_every=0.0)
    err = capsys.readouterr().err
    assert [ln.split("  ")[0] for ln in err.splitlines()] == [
        f"train copy: step {i}/3" for i in (1, 2, 3)
    ]


def test_presets_fill_the_model_and_every_flag_overrides():
    copy = TaskFeed(get_task("copy"))
    base = TrainOptions(task="copy", preset="base").resolved(copy)
    assert (base.n_encoder_layers, base.n_decoder_layers, base.d_model, base.n_heads,
            base.d_ff) == (6, 6, 512, 8, 2048)  # fmt: skip
    mixed = TrainOptions(task="copy", preset="base", d_model=256, n_decoder_layers=2)
    mixed = mixed.resolved(copy)
    assert (mixed.d_model, mixed.n_decoder_layers, mixed.n_encoder_layers) == (256, 2, 6)
    assert TrainOptions(task="copy").resolved(copy).d_model == 128  # the task's own size
    with pytest.raises(InputError, match="--preset must be one of"):
        TrainOptions(task="copy", preset="huge").resolved(copy)
    assert set(PRESETS) == {"tiny", "small", "base"}


def test_model_flags_are_the_model_config_fields():
    names = {f.name for f in dataclasses.fields(ModelConfig)}
    ids = {"src_vocab_size", "tgt_vocab_size", "pad_id", "bos_id", "eos_id", "unk_id", "end_ids"}
    audio = {"source", "n_mels", "encoder_positions", "max_source_len"}  # imported, not trained
    assert set(MODEL_FIELDS) == names - ids - audio
    option_names = {f.name for f in dataclasses.fields(TrainOptions)}
    assert set(MODEL_FIELDS) <= option_names
    args = build_parser().parse_args(
        [
            "train",
            "--task",
            "copy",
            "--activation",
            "silu",
            "--positions",
            "learned",
            "--no-bias",
            "--norm",
            "rms",
            "--d-head",
            "8",
            "--heads",
            "3",
        ]  # fmt: skip
    )
    assert (args.activation, args.positions, args.bias, args.norm, args.d_head, args.n_heads) == (
        "silu", "learned", False, "rms", 8, 3)  # fmt: skip
    assert args.final_norm is None  # unset flags stay None: the preset/task/saved run decides


def test_corpus_defaults_train_small_corpora_fast_and_grow_with_the_corpus():
    def enc(n: int, length: int) -> EncodedCorpus:
        ids, offsets = np.zeros(n * length, np.int32), np.arange(n + 1, dtype=np.int64) * length
        return EncodedCorpus(ids, offsets, ids, offsets)

    model, run = corpus_defaults(enc(100_000, 12))
    assert model["d_model"] == 128 and model["n_encoder_layers"] == 2 and run["steps"] <= 6000
    big, big_run = corpus_defaults(enc(1_000_000, 12))
    assert big["d_model"] == PRESETS["small"]["d_model"] and big_run["steps"] <= 20_000


def test_app_session_on_a_corpus_checkpoint_shows_the_dev_reference(tmp_path):
    from attnviz.app import session, store

    pairs, dev = _pairs(100), _pairs(6, seed=9)
    out = tmp_path / "corpus-model"
    train(TrainOptions(out=str(out), tokenizer="bpe", vocab_size=70, steps=2, eval_every=2,
                       d_model=32, n_heads=2, d_ff=64, batch_size=8),  # fmt: skip
          progress=False, pairs=pairs, dev_pairs=dev)  # fmt: skip
    state = session.new_state(str(out))
    view = session.run(state, dev[1][0])
    ckpt = attnviz.load_checkpoint(out)
    expected = [p.replace(" ", "␣") for p in ckpt.tgt_tokenizer.encode(dev[1][1]).pieces]
    assert view.payload["expected"] == [*expected, "<eos>"]
    assert view.output == ckpt.predict(dev[1][0])
    other = session.run(view.state, "chat chat")  # not a dev source: nothing to expect
    assert other.payload["expected"] is None
    assert store.model_name(str(out)) in store.menu(str(out))
    # uploaded as loose files, the dev pairs come along
    files = [str(out / n) for n in ("model.safetensors", "config.json", "dev_pairs.json")]
    uploaded = session.upload_model(session.new_state(str(out)), files, dev[1][0])
    assert uploaded.payload["expected"] == [*expected, "<eos>"]


def test_a_corpus_checkpoint_gets_a_start_from_its_dev_pairs(tmp_path):
    """A corpus model has no task, but its checkpoint stores dev pairs: they fill the Examples
    menu, the hint and the placeholder, pre-fill the Reference box of a typed dev source, and
    the health check runs on several of them, not on the one input typed."""
    from attnviz.app import session, store, views
    from attnviz.app.panels import health as health_panel
    from attnviz.app.panels import reference

    pairs, dev = _pairs(100), _pairs(20, seed=9)
    out = tmp_path / "corpus-model"
    train(TrainOptions(out=str(out), tokenizer="bpe", vocab_size=70, steps=2, eval_every=2,
                       d_model=32, n_heads=2, d_ff=64, batch_size=8),  # fmt: skip
          progress=False, pairs=pairs, dev_pairs=dev)  # fmt: skip
    ckpt = attnviz.load_checkpoint(out)
    sources = list(dict.fromkeys(s for s, _ in dev))
    examples = store.examples_of(ckpt)
    assert examples == sources[:6]
    fresh = session.new_state(str(out))
    hint = session.render(fresh).message
    assert f"e.g. <code>{html.escape(examples[0]).replace(' ', '␣')}</code>" in hint, hint
    assert views.input_placeholder(ckpt, examples) == f"e.g. {examples[0]}"
    assert reference.default_reference(fresh, dev[3][0]) == dev[3][1]
    assert reference.default_reference(fresh, "chat chat") == ""
    state = session.run(fresh, "chat chat").state
    texts = health_panel.health_inputs(state)
    assert texts[0] == "chat chat" and set(sources[: len(texts) - 1]) <= set(texts)
    assert len(texts) > 8
    report = health_panel.health(state).message
    assert f"{len(texts)} given inputs" in report, report


@pytest.mark.slow
def test_two_process_gloo_ddp_run_on_a_corpus(tmp_path):
    """Under torchrun each rank draws from its own shard; rank 0's vocabulary is everyone's."""
    data = _write(tmp_path, "tsv", _pairs(240))
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "attnviz.cli", "train", "--data", *data, "--out", str(out), "--tokenizer", "bpe",
           "--vocab-size", "80", "--steps", "4", "--eval-every", "2", "--device", "cpu", *TINY]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = attnviz.load_checkpoint(out)
    assert (
        ckpt.meta["world_size"] == 2 and ckpt.meta["kept"]["last_step"] == 4 and ckpt.task is None
    )
    assert done.stdout.count("saved ") == 1 and done.stdout.count("held out") == 1
