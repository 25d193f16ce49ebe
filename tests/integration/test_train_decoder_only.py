"""Training decoder-only models: a prefix LM on a task (``<bos> source <sep> target``), the
repeat task's induction scores at every snapshot, checkpoints that load and decode the way
they were trained, and the kinds and sources not trained refused in one line."""

from __future__ import annotations

import pytest

import attnviz
from attnviz.analysis import induction_scores
from attnviz.cli.commands import main
from attnviz.core.errors import InputError
from attnviz.train.loop import TrainOptions, train
from attnviz.train.snapshots import Snapshots


def _opts(tmp_path, task="reverse", **kw) -> TrainOptions:
    base = dict(task=task, arch="decoder-only", out=str(tmp_path / "run"), steps=30,
                eval_every=15, eval_size=40, snapshot_every=10, d_model=32, n_heads=2,
                n_decoder_layers=2, d_ff=64, batch_size=16)  # fmt: skip
    return TrainOptions(**{**base, **kw})


def test_a_prefix_lm_run_saves_a_checkpoint_that_reads_the_source_as_it_was_trained(tmp_path):
    metrics = train(_opts(tmp_path), progress=False)
    assert metrics["val_loss"] > 0 and 0 <= metrics["val_exact_match"] <= 1
    ckpt = attnviz.load_checkpoint(tmp_path / "run")
    assert ckpt.config.arch == "decoder-only" and ckpt.model.encoder is None
    assert ckpt.prompt is not None and ckpt.prompt.loss == "target"
    assert ckpt.src_tokenizer.token(ckpt.prompt.sep_id) == "<sep>"
    enc = ckpt.encode_source("abc")
    assert enc.pieces == ["<bos>", "a", "b", "c", "<sep>"]
    assert enc.ids[0] == ckpt.config.bos_id and enc.ids[-1] == ckpt.prompt.sep_id
    # batched by prompt length == one at a time == the stepper
    texts = ["abc", "xy", "hello", "qrs", "a"]
    one = [ckpt.predict(t) for t in texts]
    assert ckpt.predict_batch(texts) == one
    stepper = ckpt.stepper("abc")
    stepper.run()
    assert ckpt.tgt_tokenizer.decode(stepper.tokens) == one[0]
    # snapshots hold the decoder's self-attention over the probe's whole sequence
    snaps = Snapshots.load(tmp_path / "run")
    assert [k for k, _ in snaps.weights] == ["decoder_self", "decoder_self"]
    w = snaps.weights[("decoder_self", 0)][0]
    assert w.shape[-1] == w.shape[-2] == len(snaps.probe_src) and snaps.scores is None


def test_the_repeat_task_measures_induction_at_every_snapshot(tmp_path):
    opts = _opts(tmp_path, task="repeat", n_heads=2, d_model=32, d_ff=None, n_decoder_layers=None)
    train(opts, progress=False)
    ckpt = attnviz.load_checkpoint(tmp_path / "run")
    assert ckpt.config.attn_only and ckpt.config.n_decoder_layers == 2
    assert ckpt.prompt.sep_id is None and ckpt.prompt.loss == "all"
    snaps = Snapshots.load(tmp_path / "run")
    assert len(snaps.scores) == len(snaps.steps) == 4  # steps 0, 10, 20, 30
    first = snaps.scores[0]
    assert len(first["induction"]) == 2 and len(first["induction"][0]) == 2
    assert first["loss_first"] > 3.5  # ln 62 = 4.13 for tokens that cannot be predicted
    again = induction_scores(ckpt, n=64, length=20)
    assert again.to_dict()["induction"] == snaps.scores[-1]["induction"]


def test_an_unknown_kind_is_refused_in_one_line(tmp_path):
    with pytest.raises(InputError, match="--arch must be"):
        train(_opts(tmp_path, arch="encoder-decoder-only"), progress=False)
    with pytest.raises(InputError, match="decoder-only"):
        induction_scores(attnviz.load_checkpoint("models/reverse"))


def test_the_cli_trains_an_attention_only_decoder_and_prints_its_induction_scores(tmp_path, capsys):
    out = tmp_path / "ind"
    code = main(["train", "--task", "repeat", "--out", str(out), "--steps", "4",
                 "--eval-every", "4", "--eval-size", "8", "--d-model", "16"])  # fmt: skip
    assert code == 0
    assert "decoder-only, 2 layers" in capsys.readouterr().out
    assert main(["induction", str(out), "--n", "8", "--length", "10"]) == 0
    text = capsys.readouterr().out
    assert "best induction head: layer" in text and "in-context gain" in text
    assert main(["induction", str(out), "--length", "40"]) != 0
    assert "needs 81 positions" in capsys.readouterr().err


def test_a_corpus_trains_a_decoder_only_model_on_one_vocabulary(tmp_path):
    """``--data`` with ``--arch decoder-only``: each pair is ``<bos> source <eos> target <eos>``
    over one trained vocabulary; the checkpoint continues a source exactly as training read it."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    lines = [f"{a} {b}\t{b} {a}" for a in words for b in words]
    (tmp_path / "c.tsv").write_text("\n".join(lines * 3) + "\n")
    opts = _opts(tmp_path, task=None, data=[str(tmp_path / "c.tsv")], tokenizer="word",
                 max_len=4, steps=20, eval_every=20)  # fmt: skip
    metrics = train(opts, progress=False)
    assert metrics["val_loss"] > 0
    ckpt = attnviz.load_checkpoint(tmp_path / "run")
    assert ckpt.config.arch == "decoder-only" and ckpt.src_tokenizer == ckpt.tgt_tokenizer
    assert ckpt.config.src_vocab_size == ckpt.config.tgt_vocab_size == len(ckpt.src_tokenizer)
    assert ckpt.config.max_len == 2 * 4 + 2  # <bos> 4 <eos> 4 <eos>, less the last token
    enc = ckpt.encode_source("beta gamma")
    assert enc.pieces == ["<bos>", "beta", "gamma", "<eos>"]
    assert ckpt.prompt.sep_id == ckpt.config.eos_id and ckpt.prompt.loss == "target"
    texts = ["beta gamma", "alpha zeta", "delta delta"]
    one = [ckpt.predict(t) for t in texts]
    assert ckpt.predict_batch(texts) == one
    stepper = ckpt.stepper("beta gamma")
    stepper.run()
    assert ckpt.tgt_tokenizer.decode(stepper.tokens) == one[0]


def test_a_decoder_only_corpus_run_refuses_a_hugging_face_init(tmp_path):
    """The corpus's vocabulary is trained here; a given pair of tokenizers is refused."""
    from attnviz.core.model_kind import Kind
    from attnviz.data.tasks import Example
    from attnviz.data.tokenizer import Tokenizer
    from attnviz.train.feeds import Feed, one_stack

    a, b = Tokenizer("char", list("ab")), Tokenizer("char", list("abc"))
    feed = Feed("corpus", a, b, Example("a", "b"))
    with pytest.raises(InputError, match="one vocabulary"):
        one_stack(feed, Kind("decoder-only"))
