"""Checkpoints: exact round trip, atomic writes, and one clear error for every bad file."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from helpers import make_model, random_batch

import attnviz
from attnviz.checkpoint import METADATA, WEIGHTS, read_tensors, write_tensors
from attnviz.core.errors import CheckpointError, InputError
from attnviz.core.files import replace_atomically
from attnviz.data.tokenizer import Tokenizer


def _tokenizers(model):
    cfg = model.config
    src = Tokenizer("word", [f"s{i}" for i in range(cfg.src_vocab_size - 4)])
    tgt = Tokenizer("word", [f"t{i}" for i in range(cfg.tgt_vocab_size - 4)])
    return src, tgt


@pytest.fixture(scope="module")
def save():
    """Factory: ``save(tmp_path, **config_overrides)`` -> (model, checkpoint folder)."""

    def _save(tmp_path, **overrides):
        model = make_model(**overrides)
        src, tgt = _tokenizers(model)
        meta = {"task": None, "note": "x"}
        folder = attnviz.save_checkpoint(tmp_path / "ck", model, src, tgt, meta)
        return model, folder

    return _save


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_output": True, "tgt_vocab_size": 23, "share_embeddings": True},
        {"norm_first": True, "final_norm": True},
    ],
)
def test_round_trip_gives_identical_logits(tmp_path, overrides, save):
    model, folder = save(tmp_path, **overrides)
    ckpt = attnviz.load_checkpoint(folder)
    assert ckpt.config == model.config
    assert ckpt.meta["note"] == "x" and ckpt.meta["attnviz_version"] == attnviz.__version__
    assert not ckpt.model.training
    src = torch.randint(4, model.config.src_vocab_size, (2, 5))
    tgt = torch.randint(4, model.config.tgt_vocab_size, (2, 4))
    torch.testing.assert_close(ckpt.model(src, tgt), model(src, tgt), rtol=0, atol=0)
    if model.config.tie_output:
        assert ckpt.model.generator.weight is ckpt.model.tgt_embed.weight
    assert json.loads((folder / METADATA).read_text())["config"] == model.config.to_dict()
    assert attnviz.load_checkpoint(folder / WEIGHTS).config == model.config


def test_header_metadata_wins_and_plain_safetensors_use_config_json(tmp_path, save):
    model, folder = save(tmp_path)
    doc = json.loads((folder / METADATA).read_text())
    (folder / METADATA).write_text(json.dumps({**doc, "note": "stale"}))
    assert attnviz.load_checkpoint(folder).meta["note"] == "x"
    tensors, _ = read_tensors(folder / WEIGHTS)
    write_tensors(folder / WEIGHTS, tensors, None)  # a hand-made checkpoint
    assert attnviz.load_checkpoint(folder).meta["note"] == "stale"


def _one_line(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg
    return msg


def test_missing_folder_and_missing_files(tmp_path, save):
    with pytest.raises(CheckpointError, match="no checkpoint at") as e:
        attnviz.load_checkpoint(tmp_path / "nothing")
    _one_line(e)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        attnviz.load_checkpoint(tmp_path / "empty")
    _, folder = save(tmp_path)
    tensors, _ = read_tensors(folder / WEIGHTS)
    write_tensors(folder / WEIGHTS, tensors, None)
    (folder / METADATA).unlink()
    with pytest.raises(CheckpointError, match="config.json is missing"):
        attnviz.load_checkpoint(folder)


def test_truncated_weights(tmp_path, save):
    _, folder = save(tmp_path)
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable safetensors file") as e:
        attnviz.load_checkpoint(folder)
    _one_line(e)


class _Boom:
    def __reduce__(self):  # would run on unpickling
        return (exec, ("raise SystemExit('unpickled!')",))


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_pickles_are_refused_without_being_unpickled(tmp_path, how, save):
    _, folder = save(tmp_path)
    if how == "torch.save":
        torch.save({"x": _Boom()}, folder / WEIGHTS)
    else:
        (folder / WEIGHTS).write_bytes(pickle.dumps(_Boom()))
    with pytest.raises(CheckpointError, match="never unpickles") as e:
        attnviz.load_checkpoint(folder)
    _one_line(e)
    evil = tmp_path / "model.pt"
    evil.write_bytes((folder / WEIGHTS).read_bytes())
    with pytest.raises(CheckpointError, match="never unpickles"):
        attnviz.load_checkpoint(evil)


def _rewrite(folder, tensors=None, meta_change=None):
    tensors_now, meta = read_tensors(folder / WEIGHTS)
    if meta_change:
        meta_change(meta)
    write_tensors(folder / WEIGHTS, tensors if tensors is not None else tensors_now, meta)
    return tensors_now


def test_shapes_and_names_are_checked_against_the_config(tmp_path, save):
    _, folder = save(tmp_path)
    _rewrite(folder, meta_change=lambda m: m["config"].update(d_ff=41))
    with pytest.raises(
        CheckpointError,
        match=r"do not match the config: .*linear1.weight \[40, 24\] \(config wants \[41, 24\]\)",
    ) as e:
        attnviz.load_checkpoint(folder)
    _one_line(e)

    _, folder = save(tmp_path / "b")
    tensors = _rewrite(folder)
    del tensors["generator.bias"]
    tensors["extra.weight"] = torch.zeros(2)
    _rewrite(folder, tensors)
    with pytest.raises(CheckpointError, match="missing tensors: generator.bias"):
        attnviz.load_checkpoint(folder)


def test_bad_metadata_is_refused(tmp_path, save):
    _, folder = save(tmp_path)
    _rewrite(folder, meta_change=lambda m: m["config"].update(n_heads=5))
    with pytest.raises(CheckpointError, match="divide"):
        attnviz.load_checkpoint(folder)
    _, folder = save(tmp_path / "b")
    _rewrite(folder, meta_change=lambda m: m["src_tokenizer"]["tokens"].pop())
    with pytest.raises(
        CheckpointError, match="source tokenizer has 22 tokens but the model expects 23"
    ):
        attnviz.load_checkpoint(folder)
    _, folder = save(tmp_path / "c")
    _rewrite(folder, meta_change=lambda m: m.pop("config"))
    with pytest.raises(CheckpointError, match="no model 'config'"):
        attnviz.load_checkpoint(folder)


def test_non_finite_or_integer_weights_are_refused(tmp_path, save):
    _, folder = save(tmp_path)
    tensors = _rewrite(folder)
    tensors["generator.bias"] = torch.full_like(tensors["generator.bias"], float("nan"))
    _rewrite(folder, tensors)
    with pytest.raises(CheckpointError, match="NaN or inf in generator.bias"):
        attnviz.load_checkpoint(folder)
    tensors["generator.bias"] = torch.zeros_like(tensors["generator.bias"], dtype=torch.long)
    _rewrite(folder, tensors)
    with pytest.raises(CheckpointError, match="non-float"):
        attnviz.load_checkpoint(folder)


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    target = tmp_path / "f.json"
    target.write_text("old")

    def crash(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt("crash")

    with pytest.raises(KeyboardInterrupt, match="^crash$"):  # passed through as it is
        replace_atomically(target, crash)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_predict_reports_unknowns_and_refuses_empty_or_long_input(tmp_path, save):
    _, folder = save(tmp_path)
    ckpt = attnviz.load_checkpoint(folder)
    details = ckpt.predict_details("s1 zebra s2")
    assert details.source.unknown == ["zebra"]
    assert isinstance(details.text, str) and details.text == ckpt.predict("s1 zebra s2")
    assert ckpt.predict_batch(["s1 zebra s2", "s3"]) == [details.text, ckpt.predict("s3")]
    with pytest.raises(InputError, match="empty"):
        ckpt.predict("   ")
    with pytest.raises(InputError, match="at most 200"):
        ckpt.predict(" ".join(["s1"] * 201))


def test_saving_refuses_tokenizers_that_do_not_fit(tmp_path):
    model = make_model()
    src, _ = _tokenizers(model)
    with pytest.raises(CheckpointError, match="target tokenizer"):
        attnviz.save_checkpoint(tmp_path, model, src, src)


def test_any_header_length_reads_back(tmp_path):
    # the header length's first byte can be 0x80 (a pickle's first byte): still safetensors
    path = tmp_path / "x.safetensors"
    first_bytes = set()
    for pad in range(256):
        write_tensors(path, {"a": torch.arange(3.0)}, {"x": "y" * pad})
        first_bytes.add(path.read_bytes()[0])
        tensors, meta = read_tensors(path)
        assert meta == {"x": "y" * pad} and tensors["a"].tolist() == [0.0, 1.0, 2.0]
    assert 0x80 in first_bytes


@pytest.fixture
def built(monkeypatch):
    """The device of every Transformer built from now on (the default device at the time)."""
    devices = []
    init = attnviz.Transformer.__init__

    def spy(self, config):
        devices.append(torch.empty(0).device.type)
        init(self, config)

    monkeypatch.setattr(attnviz.Transformer, "__init__", spy)
    return devices


def test_a_config_asking_for_a_huge_model_is_refused_before_allocating(tmp_path, save, built):
    _, folder = save(tmp_path)
    _rewrite(folder, meta_change=lambda m: m["config"].update(d_model=2**16, d_ff=2**20))
    built.clear()  # the model saved above
    with pytest.raises(CheckpointError, match="too big for this machine"):
        attnviz.load_checkpoint(folder)  # real tensors would need ~2.6 TB
    assert built == []  # refused from the config's arithmetic: not even a meta skeleton


def test_names_and_shapes_are_checked_on_the_meta_device_first(tmp_path, save, built):
    _, folder = save(tmp_path)
    _rewrite(folder, meta_change=lambda m: m["config"].update(d_ff=41))
    built.clear()  # the model saved above
    with pytest.raises(CheckpointError, match="do not match the config"):
        attnviz.load_checkpoint(folder)
    assert built == ["meta"]  # nothing was allocated for the refused weights
    _rewrite(folder, meta_change=lambda m: m["config"].update(d_ff=40))
    attnviz.load_checkpoint(folder)
    assert built == ["meta", "meta", "cpu"]


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(d_model=-8), "d_model"),
        (dict(n_encoder_layers=0), "layers"),
        (dict(dropout=1.5), "dropout"),
    ],
)
def test_impossible_configs_are_refused(tmp_path, change, match, save):
    _, folder = save(tmp_path)
    _rewrite(folder, meta_change=lambda m: m["config"].update(**change))
    with pytest.raises(CheckpointError, match=match):
        attnviz.load_checkpoint(folder)


def test_a_pickle_payload_never_runs(tmp_path, save):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    _, folder = save(tmp_path / "ck")
    for name in ("model.safetensors", "model.pt"):
        target = folder / name
        target.write_bytes(pickle.dumps(Payload()))
        with pytest.raises(CheckpointError, match="never unpickles"):
            attnviz.load_checkpoint(target if name.endswith(".pt") else folder)
    assert not marker.exists()


def test_config_json_that_is_not_json_is_refused(tmp_path, save):
    _, folder = save(tmp_path)
    tensors, _ = read_tensors(folder / WEIGHTS)
    write_tensors(folder / WEIGHTS, tensors, None)  # metadata only in config.json now
    (folder / METADATA).write_text('{"config": {"d_model": 24,')  # cut off
    with pytest.raises(CheckpointError, match="config.json is not valid JSON") as e:
        attnviz.load_checkpoint(folder)
    _one_line(e)


def test_the_finite_check_reads_the_sum_first_and_the_cells_when_it_must():
    from attnviz.core.weights import finite

    t = torch.randn(1000)
    assert finite(t)
    for bad in (float("nan"), float("inf"), -float("inf")):
        u = t.clone()
        u[123] = bad
        assert not finite(u)
    huge = torch.full((10,), 3e38)  # finite numbers whose float32 sum would overflow
    assert finite(huge) and finite(torch.zeros(0)) and finite(torch.arange(3))


def test_a_model_built_for_a_checkpoint_skips_the_random_start_and_keeps_its_buffers():
    """build_model leaves parameters as allocated (each is overwritten at once) but keeps
    what constructors compute (a sinusoid table); nn.init works again afterwards."""
    from attnviz.core.weights import build_model, unique_state_dict

    ref = make_model(seed=3)
    state = {k: v.clone() for k, v in unique_state_dict(ref).items()}
    built = build_model(ref.config, state, "test")
    for (k, a), b in zip(ref.state_dict().items(), built.state_dict().values(), strict=True):
        assert torch.equal(a, b), k
    src, tgt, sp, tp = random_batch(ref)
    assert torch.equal(ref(src, tgt, sp, tp), built(src, tgt, sp, tp))
    w = torch.zeros(3, 3)
    torch.nn.init.uniform_(w)
    assert bool((w != 0).any())
