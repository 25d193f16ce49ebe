"""Training encoder-only models: a masked LM over a task's pairs (``<bos> source <sep>
target <eos>`` read whole), a checkpoint whose mask filling, snapshots and evaluation read the
layout it was trained on, and the sources it does not train on refused in one line."""

from __future__ import annotations

import pytest

import attnviz
from attnviz.analysis import fill_mask
from attnviz.analysis.masked_lm import answer_query
from attnviz.cli.commands import main
from attnviz.core.errors import InputError
from attnviz.decode.fill import fill_texts
from attnviz.train.evaluate import exact_match_by_length
from attnviz.train.loop import TrainOptions, train
from attnviz.train.snapshots import Snapshots


def _opts(tmp_path, **kw) -> TrainOptions:
    base = dict(task="reverse", arch="encoder-only", out=str(tmp_path / "run"), steps=30,
                eval_every=15, eval_size=40, snapshot_every=10, d_model=32, n_heads=2,
                n_encoder_layers=2, d_ff=64, batch_size=16)  # fmt: skip
    return TrainOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlm")
    metrics = train(_opts(tmp), progress=False)
    return metrics, attnviz.load_checkpoint(tmp / "run"), tmp / "run"


def test_a_masked_lm_run_saves_an_encoder_only_checkpoint_with_its_layout(run):
    metrics, ckpt, _ = run
    assert metrics["val_loss"] > 0 and 0 <= metrics["val_exact_match"] <= 1
    assert ckpt.config.arch == "encoder-only" and ckpt.model.decoder is None
    prompt = ckpt.prompt
    assert prompt.loss == "mlm" and ckpt.src_tokenizer.token(prompt.mask_id) == "<mask>"
    text = answer_query(ckpt, "abc", "cba")
    assert text == "abc<sep><mask><mask><mask>"
    enc = ckpt.encode_source(text)
    assert enc.pieces == ["<bos>", "a", "b", "c", "<sep>", "<mask>", "<mask>", "<mask>", "<eos>"]


def test_fill_mask_the_evaluation_and_the_validation_fill_the_same_answer(run):
    _, ckpt, _ = run
    filled = fill_mask(ckpt, answer_query(ckpt, "hello", "olleh"), k=1)
    assert [pos for pos, _ in filled.fillers] == [7, 8, 9, 10, 11]
    top = "".join(best[0][0] for _, best in filled.fillers)
    ex = attnviz.data.tasks.Example("hello", "olleh")
    assert fill_texts(ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer, ckpt.prompt, [ex]) == [
        top
    ]
    assert filled.trace.keys() == [("encoder_self", 0), ("encoder_self", 1)]
    counts = exact_match_by_length(ckpt, per_length=4)
    assert sorted(counts) == list(range(1, 21)) and all(n > 0 for _, n in counts.values())


def test_snapshots_hold_the_encoder_attention_over_the_masked_probe(run):
    _, _, out = run
    snaps = Snapshots.load(out)
    assert [k for k, _ in snaps.weights] == ["encoder_self", "encoder_self"]
    assert snaps.probe_src[0] == "<bos>" and "<sep>" in snaps.probe_src
    assert snaps.probe_src.count("<mask>") == len("helloworld")
    w = snaps.weights[("encoder_self", 0)][0]
    assert w.shape[-1] == w.shape[-2] == len(snaps.probe_src)


def test_a_corpus_is_refused_for_encoder_only_in_one_line(tmp_path):
    (tmp_path / "c.tsv").write_text("a b\tc d\n" * 50)
    with pytest.raises(InputError, match="masked LM on a built-in --task"):
        train(_opts(tmp_path, task=None, data=[str(tmp_path / "c.tsv")]), progress=False)


def test_the_cli_trains_and_fills_an_encoder_only_model(tmp_path, capsys):
    out = tmp_path / "m"
    assert main(["train", "--task", "copy", "--arch", "encoder-only", "--out", str(out),
                 "--steps", "4", "--eval-every", "4", "--eval-size", "8", "--d-model", "16",
                 "--n-heads", "2"]) == 0  # fmt: skip
    assert "encoder-only, 2 layers" in capsys.readouterr().out
    assert main(["fill-mask", str(out), "--text", "ab<sep><mask><mask>"]) == 0
    assert "position 4 (<mask>)" in capsys.readouterr().out


def test_the_app_offers_the_task_inputs_with_their_answers_masked_and_reads_them(run):
    from attnviz.app import session, store

    _, ckpt, out = run
    examples = store.examples_of(ckpt, 2)
    assert examples[0] == "helloworld<sep>" + "<mask>" * 10
    view = session.start(session.new_state(str(out)), examples[1])
    fill = fill_mask(ckpt, examples[1], k=5)
    assert view.payload["pieces"] == fill.pieces
    assert [f["position"] for f in view.payload["fillers"]] == [p for p, _ in fill.fillers]


def test_predict_refuses_in_one_line_and_the_health_check_fills_the_answers(run):
    from attnviz.analysis import health

    _, ckpt, _ = run
    with pytest.raises(InputError, match="generates nothing") as info:
        ckpt.predict("abc")
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match="generates nothing"):
        ckpt.predict_batch(["abc"])
    report = health.check(ckpt, n=8, ablation_sample=0)
    accuracy = next(f for f in report.findings if f.check == "accuracy")
    assert accuracy.message.startswith("filled-in exact match")
    examples = attnviz.data.tasks.get_task("reverse").examples("validation", 3, seed=0)
    assert len(ckpt.task_outputs(examples)) == 3
