"""Generation settings a Hugging Face folder leaves out follow transformers' defaults.

transformers is the oracle: for every family, a tiny random folder saved with no length
setting decodes (``greedy_decode``, the stepper, ``predict``) to exactly ``generate()``'s
tokens, and beam search keeps to the same length limit.
"""

from __future__ import annotations

import pytest
import torch

import attnviz
from attnviz.decode.batched import greedy_decode
from attnviz.decode.greedy import GreedyStepper

transformers = pytest.importorskip("transformers")

from tests import hf_families  # noqa: E402  (after the skip)

FAMILIES = list(hf_families.FAMILIES)  # every registered model_type (see below)


def _sources(cfg: attnviz.ModelConfig, n: int = 8, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 40, (n, 7), generator=g)


def _cut(row: list[int], eos_id: int) -> list[int]:
    """A row up to and with its first end id (a pad id before it is a real token: T5 can
    produce its start/pad id 0)."""
    return row[: row.index(eos_id) + 1] if eos_id in row else row


def _generate(hf_model, src: torch.Tensor, family: str, **kwargs) -> list[list[int]]:
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=src,
            attention_mask=torch.ones_like(src),
            do_sample=False,
            use_cache=not family.startswith("t5"),  # see test_hf.test_greedy_matches_generate
            **{"num_beams": 1, **kwargs},
        )
    return out[:, 1:].tolist()  # without the decoder start


@pytest.fixture(scope="module")
def default_folders(tmp_path_factory):
    """family -> (transformers model, folder saved without any length setting)."""
    from tests.hf_families import build

    out = {}
    for family in FAMILIES:
        model = build(family, seed=3)
        for key in ("max_length", "max_new_tokens"):
            setattr(model.generation_config, key, None)
        folder = tmp_path_factory.mktemp(family.replace(".", "_"))
        model.save_pretrained(folder, safe_serialization=True)
        out[family] = (model, folder)
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_default_length_equals_generate(default_folders, family):
    """No max_length in the folder: 20 new tokens, as generate() gives (not 19)."""
    hf_model, folder = default_folders[family]
    gen = (folder / "generation_config.json").read_text()
    assert "max_length" not in gen and "max_new_tokens" not in gen
    ckpt = attnviz.load_checkpoint(folder)
    cfg = ckpt.config
    assert ckpt.max_new_tokens == 20
    src = _sources(cfg)
    theirs = [_cut(r, cfg.eos_id) for r in _generate(hf_model, src, family)]
    assert max(len(r) for r in theirs) == 20  # the limit is reached, so it is tested
    ours = greedy_decode(
        ckpt.model, src, cfg.bos_id, cfg.eos_id, max_len=ckpt.max_new_tokens, rules=ckpt.rules
    ).tolist()
    assert [_cut(r, cfg.eos_id) for r in ours] == theirs
    longest = max(range(len(theirs)), key=lambda i: len(theirs[i]))
    for row, ref in ((src[longest], theirs[longest]), (src[0], theirs[0])):
        stepper = GreedyStepper(
            ckpt.model, row, cfg.bos_id, cfg.eos_id, max_len=ckpt.max_new_tokens, rules=ckpt.rules
        )
        assert stepper.run() == ref


def test_default_length_is_cut_at_the_position_table(tmp_path):
    """transformers caps the default max_length at max_position_embeddings."""
    from tests.hf_families import build

    hf_model = build("marian", seed=3, max_position_embeddings=12)
    hf_model.generation_config.max_length = None
    hf_model.save_pretrained(tmp_path, safe_serialization=True)
    ckpt = attnviz.load_checkpoint(tmp_path)
    assert ckpt.max_new_tokens == 11
    cfg = ckpt.config
    src = _sources(cfg, n=4)
    theirs = [_cut(r, cfg.eos_id) for r in _generate(hf_model, src, "marian")]
    ours = greedy_decode(
        ckpt.model, src, cfg.bos_id, cfg.eos_id, max_len=ckpt.max_new_tokens, rules=ckpt.rules
    ).tolist()
    assert [_cut(r, cfg.eos_id) for r in ours] == theirs
    assert max(len(r) for r in theirs) == 11


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, 20),
        ({"max_length": 9}, 8),
        ({"max_new_tokens": 5, "max_length": 9}, 5),
    ],
)
def test_length_settings_as_transformers_reads_them(settings, expected):
    from attnviz.interop.hf import max_new_tokens

    assert max_new_tokens(settings, {"max_position_embeddings": 512}) == expected


def test_min_new_tokens_takes_precedence_over_min_length():
    from attnviz.interop.hf import generation_rules

    cfg = attnviz.ModelConfig(src_vocab_size=9, tgt_vocab_size=9)
    rules = generation_rules({"min_length": 10, "min_new_tokens": 2}, cfg)[0]
    assert rules.min_new_tokens == 2
    assert generation_rules({"min_length": 4}, cfg)[0].min_new_tokens == 3


def test_settings_that_ban_every_token_are_refused():
    """suppress_tokens and single-token bad_words_ids covering the vocabulary: one line at
    load, not a decode that produces the banned id 0; one id left free decodes."""
    from attnviz.core.errors import InteropError
    from attnviz.interop.hf import generation_rules

    cfg = attnviz.ModelConfig(src_vocab_size=9, tgt_vocab_size=9)
    for gen in ({"suppress_tokens": list(range(9))},
                {"suppress_tokens": list(range(5)), "bad_words_ids": [[i] for i in range(5, 9)]}):  # fmt: skip
        with pytest.raises(InteropError, match="ban every one of the 9 tokens"):
            generation_rules(gen, cfg)
    assert len(generation_rules({"suppress_tokens": list(range(8))}, cfg)[0].banned) == 8


# -- text: a Marian folder with its own tokenizer and no length setting --------------------------
TEXTS = ["the cat sat on the mat", "a bird sang", "we walked to the park today"]


@pytest.fixture(scope="module")
def marian_text(tmp_path_factory):
    """(transformers model, tokenizer, folder): Marian, its tokenizer, no length setting."""
    from tests import hf_families

    root = tmp_path_factory.mktemp("marian_text")
    tok = hf_families.marian_tokenizer(root / "tok")
    hf_model = hf_families.build(
        "marian",
        seed=3,
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        decoder_start_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    hf_model.generation_config.max_length = None
    hf_model.save_pretrained(root / "model", safe_serialization=True)
    tok.save_pretrained(root / "model")
    return hf_model, tok, root / "model"


def test_predict_stepper_and_app_give_generate_text_at_the_default_length(marian_text):
    from attnviz.app import session

    hf_model, tok, folder = marian_text
    ckpt = attnviz.load_checkpoint(folder)
    state = session.new_state(str(folder))
    lengths = []
    for text in TEXTS:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = hf_model.generate(**enc, num_beams=1, do_sample=False)
        lengths.append(out.shape[1] - 1)
        expected = tok.decode(out[0], skip_special_tokens=True)
        assert ckpt.predict(text) == expected
        assert ckpt.stepper(text).run() == out[0, 1:].tolist()
        view = session.run(session.start(state, text).state, text)  # the app's Run
        assert view.state.tokens == out[0, 1:].tolist()
    assert max(lengths) == 20


def test_beam_search_keeps_to_the_folder_length_limit(marian_text):
    """Beam search stops where greedy does (it used to run to 2 * Ts + 16 tokens)."""
    from attnviz.app import session

    _, _, folder = marian_text
    ckpt = attnviz.load_checkpoint(folder)
    lengths = [len(ckpt.beam(text, 3).tokens) for text in TEXTS]
    assert max(lengths) == ckpt.max_new_tokens == 20
    assert ckpt.predict(TEXTS[0], num_beams=3) == ckpt.tgt_tokenizer.decode(
        ckpt.beam(TEXTS[0], 3).tokens
    )
    html = session.beam(session.new_state(str(folder)), 3, TEXTS[2])
    assert ckpt.tgt_tokenizer.decode(ckpt.beam(TEXTS[2], 3).tokens) in html


def test_predict_batch_and_evaluate_follow_the_folders_num_beams(marian_text, tmp_path):
    """A folder whose generation config sets num_beams: every batch path decodes as
    generate() does (beam search), as predict() already did."""
    from attnviz.cli import main
    from attnviz.train.evaluate import evaluate_pairs
    from tests import hf_families

    hf_model, tok, _ = marian_text
    texts = TEXTS + ["the dog sang in the park", "a cat read a book at home"]
    folder = hf_families.save(hf_model, tmp_path / "beam", num_beams=4)
    tok.save_pretrained(folder)
    hf_model.generation_config.num_beams = 1  # the fixture's model is shared
    ckpt = attnviz.load_checkpoint(folder)
    beams, greedy = [], []
    for text in texts:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            for k, out in ((4, beams), (1, greedy)):
                ids = hf_model.generate(**enc, num_beams=k, do_sample=False)
                out.append(tok.decode(ids[0], skip_special_tokens=True))
    assert beams != greedy  # the beam size changes the output, so following it is tested
    assert ckpt.predict_batch(texts) == beams == [ckpt.predict(t) for t in texts]
    assert ckpt.predict_batch(texts, num_beams=1) == greedy
    report = evaluate_pairs(ckpt, [(t, b) for t, b in zip(texts, beams, strict=True)])
    assert report.predictions == beams and report.exact == len(texts)
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"{t}\t{b}\n" for t, b in zip(texts, beams, strict=True)))
    preds = tmp_path / "preds.txt"
    assert main(["evaluate", str(folder), "--data", str(corpus), "--predictions", str(preds)]) == 0
    assert preds.read_text().splitlines() == beams


@pytest.mark.parametrize(("family", "bos"), [("bart", 0), ("mbart", 7)])
def test_begin_suppress_tokens_after_a_forced_bos_equal_generate(tmp_path, family, bos):
    """With a forced first token, transformers suppresses ``begin_suppress_tokens`` at the
    second step (its begin index moves by one); greedy used to ban them at the first."""
    from attnviz.decode.batched import until_eos
    from attnviz.decode.beam import beam_search
    from tests.hf_families import build, save

    hf_model = build(family, seed=0)
    src = torch.randint(3, 40, (1, 8), generator=torch.Generator().manual_seed(0))
    free = _generate(hf_model, src, family, forced_bos_token_id=bos, max_new_tokens=8)[0]
    folder = save(hf_model, tmp_path, forced_bos_token_id=bos, begin_suppress_tokens=free[1:3],
                  max_new_tokens=8)  # fmt: skip
    ckpt = attnviz.load_checkpoint(folder)
    cfg = ckpt.config
    n = ckpt.max_new_tokens
    for k in (1, 3):
        theirs = _cut(_generate(hf_model, src, family, num_beams=k)[0], cfg.eos_id)
        assert theirs[0] == bos and theirs[1] not in free[1:3]  # the suppression acted
        beam = beam_search(ckpt.model, src, cfg.bos_id, cfg.eos_id, beam_size=k, max_len=n,
                           rules=ckpt.rules)[0]  # fmt: skip
        assert beam.tokens == theirs, k
        if k == 1:
            assert theirs != _cut(free, cfg.eos_id)
            greedy = greedy_decode(ckpt.model, src, cfg.bos_id, cfg.eos_id, max_len=n,
                                   rules=ckpt.rules)[0].tolist()  # fmt: skip
            assert until_eos(greedy, cfg.eos_id, cfg.pad_id) == theirs
            stepper = GreedyStepper(ckpt.model, src[0], cfg.bos_id, cfg.eos_id, max_len=n,
                                    rules=ckpt.rules)  # fmt: skip
            assert stepper.run() == theirs
