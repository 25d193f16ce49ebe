"""Decoder-only Hugging Face folders (GPT-2; Llama, Mistral, Qwen2) in attnviz's own model,
checked against transformers: logits, every attention weight, greedy and beam tokens of
``generate()`` on a prompt, and text through a tokenizer trained here.

Each family is a tiny random model built in the test (see ``tests/hf_families.py``), saved
with ``save_pretrained`` and opened with :func:`attnviz.load_checkpoint`.
"""

from __future__ import annotations

import json

import pytest
import torch

import attnviz
from attnviz.core.errors import InteropError
from attnviz.decode.batched import greedy_decode, until_eos
from attnviz.decode.beam import beam_search
from attnviz.decode.greedy import GreedyStepper
from tests import hf_families

pytest.importorskip("transformers")

FAMILIES = list(hf_families.DECODER_ONLY)
NEW = 8  # max_new_tokens of every generate() below


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family -> (transformers model, saved folder), built once per module."""
    out = {}
    for family in FAMILIES:
        model = hf_families.build_one_stack(family)
        folder = tmp_path_factory.mktemp(family.replace(".", "_"))
        model.save_pretrained(folder, safe_serialization=True)
        out[family] = (model, folder)
    return out


def prompts(b: int = 2, t: int = 9, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 58, (b, t), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_every_attention_weight_match_transformers(folders, family):
    """On a right-padded batch, over the rows of real tokens."""
    hf_model, folder = folders[family]
    model = attnviz.load_checkpoint(folder).model
    assert model.config.arch == "decoder-only" and model.encoder is None
    ids = prompts()
    real = torch.ones_like(ids, dtype=torch.bool)
    real[1, 6:] = False
    with torch.no_grad():
        ref = hf_model(input_ids=ids, attention_mask=real.long(), output_attentions=True)
        fast = model(ids, pad_mask=~real)
        with attnviz.record(model) as trace:
            ours = model(ids, pad_mask=~real)
    diff = (ours - ref.logits).abs()[real].max().item()
    assert diff <= 1e-4, f"{family}: max |Δlogits| = {diff:.2e}"
    assert (fast - ours).abs()[real].max().item() <= 1e-4  # the fused path agrees
    assert [k for k, _ in trace.keys()] == ["decoder_self"] * len(ref.attentions)
    for layer, theirs in enumerate(ref.attentions):
        w = trace.weights("decoder_self", layer)
        assert w.shape == theirs.shape  # one matrix per query head, also with GQA
        diff = (w - theirs).abs().amax(dim=(1, 3))[real].max().item()
        assert diff <= 2e-5, f"{family} layer {layer}: {diff:.2e}"


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_and_beam_tokens_match_generate(folders, family):
    hf_model, folder = folders[family]
    ckpt = attnviz.load_checkpoint(folder)
    model, cfg = ckpt.model, ckpt.config
    ids = prompts()
    with torch.no_grad():
        theirs = hf_model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW,
            do_sample=False, num_beams=1, pad_token_id=cfg.pad_id,
        )[:, ids.shape[1]:]  # fmt: skip
    for fused in (True, False):
        ours = greedy_decode(
            model, ids, None, cfg.eos_id, max_len=NEW, rules=ckpt.rules, fused=fused
        )
        for mine, ref in zip(ours.tolist(), theirs.tolist(), strict=True):
            assert until_eos(mine, cfg.eos_id, cfg.pad_id) == until_eos(ref, cfg.eos_id, cfg.pad_id)
    stepper = GreedyStepper(model, ids[0], None, cfg.eos_id, max_len=NEW, rules=ckpt.rules)
    assert stepper.run() == until_eos(theirs[0].tolist(), cfg.eos_id, cfg.pad_id)
    for row in range(2):
        prompt = ids[row : row + 1]
        with torch.no_grad():
            beam_ref = hf_model.generate(
                input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW,
                do_sample=False, num_beams=3, pad_token_id=cfg.pad_id,
            )[0, prompt.shape[1]:].tolist()  # fmt: skip
        beam = beam_search(
            model, prompt, None, cfg.eos_id, beam_size=3, max_len=NEW, rules=ckpt.rules
        )[0]
        assert beam.tokens == until_eos(beam_ref, cfg.eos_id, cfg.pad_id), family


def test_stepper_trace_equals_one_recorded_pass(folders):
    """The prompt's rows and every step's row, as one teacher-forced pass records them."""
    model = attnviz.load_checkpoint(folders["llama"][1]).model
    ids = prompts(1)
    stepper = GreedyStepper(model, ids[0], None, None, max_len=5)
    tokens = stepper.run()
    seq = torch.cat([ids, torch.tensor([tokens[:-1]])], dim=1)
    with torch.no_grad(), attnviz.record(model) as ref:
        model(seq)
    trace = stepper.trace()
    for _, layer in ref.keys():
        assert torch.allclose(
            trace.weights("decoder_self", layer), ref.weights("decoder_self", layer), atol=1e-5
        )


def test_gpt2_folder_of_older_transformers_with_mask_buffers(folders, tmp_path):
    """GPT-2 folders written by transformers 4 keep the causal mask buffers (``attn.bias``,
    ``attn.masked_bias``) beside the weights: they are not weights and are skipped."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(folders["gpt2"][1], tmp_path / "old", dirs_exist_ok=True)
    tensors = load_file(tmp_path / "old" / "model.safetensors")
    for i in range(3):
        tensors[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 64, 64))
        tensors[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(tensors, tmp_path / "old" / "model.safetensors")
    model = attnviz.load_checkpoint(tmp_path / "old").model
    ids = prompts()
    with torch.no_grad():
        assert torch.allclose(model(ids), folders["gpt2"][0](ids).logits, atol=1e-4)


@pytest.mark.parametrize(
    "family, change, words",
    [
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 2.0}}, "'yarn'"),
        ("llama", {"attention_bias": True}, "attention_bias"),
        ("llama", {"attn_logit_softcapping": 50.0}, "soft-capping"),
    ],
)
def test_unsupported_features_are_refused_by_name(folders, tmp_path, family, change, words):
    import shutil

    shutil.copytree(folders[family][1], tmp_path / "f", dirs_exist_ok=True)
    config = json.loads((tmp_path / "f" / "config.json").read_text())
    (tmp_path / "f" / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(InteropError, match=words):
        attnviz.load_checkpoint(tmp_path / "f")


def test_mistral_sliding_window_is_a_mask_not_a_length_limit(folders):
    """The window is the model's own mask (tests/integration/test_hf_gemma3.py holds it to
    transformers past the window); the length limit stays max_position_embeddings."""
    cfg = attnviz.load_checkpoint(folders["mistral"][1]).config
    assert (cfg.max_len, cfg.sliding_window, cfg.layer_types) == (64, 24, None)


@pytest.fixture(scope="module")
def gpt2_with_tokenizer(tmp_path_factory):
    """A GPT-2 folder with a byte-level BPE tokenizer trained here (<|endoftext|> = 0)."""
    folder = tmp_path_factory.mktemp("gpt2_text")
    model, tok = hf_families.gpt2_text_folder(folder)
    return model, tok, folder


@pytest.mark.parametrize("num_beams", [1, 3])
def test_predict_continues_a_prompt_as_generate_does(gpt2_with_tokenizer, num_beams):
    """``ckpt.predict(prompt, max_len=n)`` is the text of ``generate(max_new_tokens=n)``
    after the prompt; without ``max_len``, 20 new tokens, as transformers' default."""
    model, tok, folder = gpt2_with_tokenizer
    ckpt = attnviz.load_checkpoint(folder)
    for prompt in ("the cat sat on", "we read a"):
        ids = tok(prompt, return_tensors="pt").input_ids
        for n in (6, None):
            limit = dict(max_new_tokens=n) if n else {}
            with torch.no_grad():
                out = model.generate(
                    ids, attention_mask=torch.ones_like(ids), do_sample=False,
                    num_beams=num_beams, pad_token_id=0, **limit,
                )[0, ids.shape[1]:]  # fmt: skip
            assert len(out) <= (n or 20)
            expected = tok.decode(out, skip_special_tokens=True)
            assert ckpt.predict(prompt, max_len=n, num_beams=num_beams) == expected


def test_older_rope_keys_read_as_rope_parameters(folders, tmp_path):
    """Folders written before transformers 5 keep ``rope_theta`` and ``rope_scaling`` at the
    top level; they give the same model as ``rope_parameters``."""
    import shutil

    folder = folders["llama-rope3"][1]
    shutil.copytree(folder, tmp_path / "old", dirs_exist_ok=True)
    config = json.loads((tmp_path / "old" / "config.json").read_text())
    params = config.pop("rope_parameters")
    config["rope_theta"] = params.pop("rope_theta")
    config["rope_scaling"] = {**params, "type": params.pop("rope_type")}
    (tmp_path / "old" / "config.json").write_text(json.dumps(config))
    new, old = attnviz.load_checkpoint(folder), attnviz.load_checkpoint(tmp_path / "old")
    assert old.config == new.config and new.config.rope_scaling == "llama3"


def test_several_end_ids_stop_greedy_beam_and_the_stepper_as_generate_does(folders, tmp_path):
    """A generation config listing several end ids (Llama 3): generate() stops at any of
    them, and so does every decoder here (the first is ``eos_id``, the rest ``end_ids``)."""
    hf_model, folder = folders["llama"]
    free = attnviz.load_checkpoint(folder)
    ids = prompts(1)
    row = greedy_decode(free.model, ids, None, None, max_len=NEW)[0].tolist()
    stop = row[2]  # a token the model produces third: made an end id
    others = [t for t in range(3, 58) if t not in row]
    ends = [others[0], stop, others[1]]
    gen = {"eos_token_id": ends, "pad_token_id": 0, "do_sample": False}
    (tmp_path / "m").mkdir()
    for f in folder.iterdir():
        (tmp_path / "m" / f.name).write_bytes(f.read_bytes())
    (tmp_path / "m" / "generation_config.json").write_text(json.dumps(gen))
    ckpt = attnviz.load_checkpoint(tmp_path / "m")
    cfg = ckpt.config
    assert cfg.eos_id == ends[0] and cfg.end_ids == (stop, ends[2])
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
              pad_token_id=0, eos_token_id=ends)  # fmt: skip
    with torch.no_grad():
        theirs = hf_model.generate(input_ids=ids, num_beams=1, **kw)[0, ids.shape[1] :].tolist()
        beam_ref = hf_model.generate(input_ids=ids, num_beams=3, **kw)[0, ids.shape[1] :].tolist()
    assert theirs == row[:3]  # generate stopped at the second end id
    cut = until_eos(theirs, cfg.eos_id, cfg.pad_id, cfg.end_ids)
    for fused in (True, False):
        mine = greedy_decode(
            ckpt.model, ids, None, cfg.eos_id, max_len=NEW, rules=ckpt.rules, fused=fused
        )
        assert until_eos(mine[0].tolist(), cfg.eos_id, cfg.pad_id, cfg.end_ids) == cut
    stepper = GreedyStepper(ckpt.model, ids[0], None, cfg.eos_id, max_len=NEW, rules=ckpt.rules)
    assert stepper.run() == cut and stepper.done
    beam = beam_search(
        ckpt.model, ids, None, cfg.eos_id, beam_size=3, max_len=NEW, rules=ckpt.rules
    )[0]
    assert beam.tokens == until_eos(beam_ref, cfg.eos_id, cfg.pad_id, cfg.end_ids)
    assert attnviz.ModelConfig.from_dict(cfg.to_dict()) == cfg  # kept through a checkpoint
