"""The app's Run, the stepper's ``run()`` and ``predict`` decode the same tokens, for every kind
and format: they all ask the checkpoint's one :class:`~attnviz.decode.decoding.Decoding`.

Before it, a Hugging Face decoder-only folder whose ``generation_config.json`` says
``max_length=12`` gave 6 new tokens after a 6-token prompt from ``predict`` and 11 from the
app's Run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import attnviz
from attnviz.app import session

pytestmark = pytest.mark.integration
MODELS = Path(__file__).resolve().parents[2] / "models"


def _three_ways(folder: Path, text: str) -> tuple[list[int], list[int], list[int]]:
    """(the app's Run, ``stepper(text).run()``, ``predict_details(text)``) output ids."""
    ckpt = attnviz.load_checkpoint(folder)
    state = session.new_state(str(folder))
    view = session.run(session.start(state, text).state, text)
    assert view.info["done"], view.message
    app = list(view.state.tokens)
    stepper = ckpt.stepper(text)
    stepper.run()
    steps = list(stepper.tokens)
    return app, steps, list(ckpt.predict_details(text).tokens)


def _same(app: list[int], steps: list[int], predicted: list[int], eos: int) -> None:
    assert app == steps == predicted, (app, steps, predicted)
    assert eos not in app[:-1]


def test_ours():
    folder = MODELS / "reverse"
    ckpt = attnviz.load_checkpoint(folder)
    _same(*_three_ways(folder, "helloworld"), ckpt.config.eos_id)


@pytest.fixture(scope="module")
def gpt2_max_length(tmp_path_factory):
    """A GPT-2 folder whose generation config says max_length=12 (it counts the prompt)."""
    pytest.importorskip("transformers")
    from tests import hf_families

    folder = tmp_path_factory.mktemp("gpt2-max-length")
    model, tok = hf_families.gpt2_text_folder(folder)
    model.generation_config.max_length = 12
    model.generation_config.max_new_tokens = None
    model.generation_config.eos_token_id = None  # never stop early: the limit decides
    model.generation_config.save_pretrained(folder)
    return model, tok, folder


def test_hf_decoder_only_with_max_length(gpt2_max_length):
    model, tok, folder = gpt2_max_length
    text = "the cat sat on the"
    ids = tok(text, return_tensors="pt").input_ids
    assert ids.shape[1] == 6, "the case verification found: a 6-token prompt"
    ckpt = attnviz.load_checkpoint(folder)
    app, steps, predicted = _three_ways(folder, text)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             num_beams=1, pad_token_id=0)[0, ids.shape[1]:]  # fmt: skip
    assert len(out) == 6
    assert predicted == out.tolist()
    assert len(app) <= 6 and len(steps) <= 6
    _same(app, steps, predicted, ckpt.config.eos_id)
    assert ckpt.limit(6) == 6 and ckpt.decoding.max_total == 12


def test_hf_encoder_decoder(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from tests import hf_families

    _, folder = hf_families.tokenized_folder(tmp_path, "marian")
    ckpt = attnviz.load_checkpoint(folder)
    for text in ("the cat sat on the mat", "a dog ran"):
        _same(*_three_ways(folder, text), ckpt.config.eos_id)


def test_ctranslate2(tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    from tests import hf_families

    tok, hf = hf_families.tokenized_folder(tmp_path, "marian")
    converter = ctranslate2.converters.TransformersConverter(str(hf))
    folder = Path(converter.convert(str(tmp_path / "ct2"), quantization="float32"))
    ckpt = attnviz.load_checkpoint(folder)
    text = " ".join(tok.convert_ids_to_tokens(tok("the cat sat on the mat").input_ids))
    _same(*_three_ways(folder, text), ckpt.config.eos_id)
