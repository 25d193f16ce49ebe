"""Beam search: the tree it keeps, greedy at beam 1, and the text of transformers' generate.

The oracle for the search itself is transformers' ``generate(num_beams=k)`` on tiny random
Hugging Face folders built here (as ``tests/integration/test_hf.py`` does for greedy decoding), under
settings of ``length_penalty``, ``early_stopping``, ``no_repeat_ngram_size`` and the minimum
length that change its output; the tree is checked against the search's own result.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from helpers import letters, make_model, unletters

import attnviz
from attnviz.cli import main
from attnviz.core.errors import InputError
from attnviz.decode.batched import greedy_decode, until_eos
from attnviz.decode.beam import BeamTree, beam_predict, beam_search
from attnviz.decode.greedy import LogitRules

try:
    import transformers

    transformers.logging.set_verbosity_error()
    HAVE_HF = True
except ImportError:
    HAVE_HF = False

needs_hf = pytest.mark.skipif(
    not HAVE_HF, reason="transformers is not installed (pip install 'attnviz[hf]')"
)


# -- the tree -----------------------------------------------------------------------------------
def check_tree(result: attnviz.BeamResult, eos_id: int | None, n_max: int) -> BeamTree:
    """The invariants every tree keeps; returns the tree."""
    tree = result.tree
    assert isinstance(tree, BeamTree)
    root = tree.nodes[0]
    assert root.parent is None and root.step == -1 and root.score == 0.0
    for i, node in enumerate(tree.nodes):
        assert node.id == i
        if i == 0:
            continue
        assert node.parent is not None and 0 <= node.parent < i  # parents come first
        parent = tree.nodes[node.parent]
        assert not parent.finished  # nothing grows out of an ended hypothesis
        assert node.step == parent.step + 1
        assert node.score == pytest.approx(parent.score + node.logp, abs=1e-4)
        assert node.logp <= 1e-6 and math.isfinite(node.score)
        if node.finished:  # ends with EOS, or at the length limit
            assert node.token == eos_id or node.step == n_max - 1
        else:
            assert node.token != eos_id
    best = tree.nodes[tree.best]
    assert best.finished
    assert tree.tokens(tree.best) == result.tokens  # the winner's path spells its tokens
    assert best.score == pytest.approx(result.score, abs=1e-4)
    assert [n.id for n in tree.path(tree.best)][-1] == tree.best
    for hyp in result.hypotheses:  # every finished hypothesis reported has its node
        assert tree.tokens(hyp.node) == hyp.tokens and tree.nodes[hyp.node].finished
    assert result.hypotheses[0].tokens == result.tokens
    return tree


@pytest.mark.parametrize(
    ("beam_size", "length_penalty", "early_stopping"),
    [(2, 1.0, False), (4, 0.0, True), (5, 2.0, "never"), (3, -0.5, False)],
)
def test_tree_invariants(beam_size, length_penalty, early_stopping):
    model = make_model(seed=4)
    cfg = model.config
    src = torch.randint(3, 23, (3, 7), generator=torch.Generator().manual_seed(2))
    free = greedy_decode(model, src, cfg.bos_id, None, max_len=12)
    eos = int(free[0, 3])  # a token the model produces, so hypotheses end at different steps
    results = beam_search(
        model, src, cfg.bos_id, eos, beam_size=beam_size, max_len=12,
        length_penalty=length_penalty, early_stopping=early_stopping, return_tree=True,
    )  # fmt: skip
    ended = 0
    for res in results:
        tree = check_tree(res, eos, 12)
        ended += sum(n.token == eos for n in tree.finished())
        # a step keeps at most beam_size running extensions
        for step in range(12):
            running = [n for n in tree.nodes if n.step == step and not n.finished]
            assert len(running) <= beam_size
        # the winner ranks first by the normalized score among the finished hypotheses
        norms = [h.normalized_score for h in res.hypotheses]
        assert norms == sorted(norms, reverse=True)
        assert res.normalized_score == pytest.approx(
            res.score / len(res.tokens) ** length_penalty, abs=1e-4
        )
    assert ended > 0  # the EOS bookkeeping was exercised


def test_tree_json_and_attention_of_the_winner(reverse_model):
    cfg = reverse_model.config
    src = torch.tensor(letters("attention"))
    res = beam_search(
        reverse_model, src, cfg.bos_id, cfg.eos_id, beam_size=3,
        return_tree=True, return_attention=True,
    )[0]  # fmt: skip
    assert unletters(res.tokens) == "noitnetta"
    check_tree(res, cfg.eos_id, 2 * len("attention") + 16)
    doc = json.loads(json.dumps(res.tree.to_dict()))
    assert doc["best"] == res.tree.best and len(doc["nodes"]) == len(res.tree.nodes)
    # the attention recorded during the search is a teacher-forced pass on the winner
    tgt_in = torch.tensor([[cfg.bos_id] + res.tokens[:-1]])
    with torch.no_grad(), attnviz.record(reverse_model) as trace:
        reverse_model(src[None], tgt_in)
    for key in trace.keys():
        assert torch.allclose(res.trace.weights(*key), trace.weights(*key), atol=1e-5), key


def test_beam_of_one_is_greedy_under_rules():
    model = make_model(seed=1)
    cfg = model.config
    src = torch.randint(3, 23, (4, 8), generator=torch.Generator().manual_seed(7))
    free = greedy_decode(model, src, cfg.bos_id, None, max_len=15)
    eos = int(free[1, 2])
    rules = LogitRules(forced_bos_id=5, banned=(7,), min_new_tokens=3, eos_id=eos)
    for settings in ({}, {"early_stopping": "never", "length_penalty": 3.0}):
        greedy = greedy_decode(model, src, cfg.bos_id, eos, max_len=15, rules=rules)
        beams = beam_search(model, src, cfg.bos_id, eos, beam_size=1, max_len=15, rules=rules,
                            return_tree=True, **settings)  # fmt: skip
        for row, res in zip(greedy.tolist(), beams, strict=True):
            assert res.tokens == until_eos(row, eos, cfg.pad_id)
            assert res.tokens[0] == 5 and 7 not in res.tokens
            check_tree(res, eos, 15)


def test_bad_settings_are_refused_in_one_line():
    model = make_model()
    src = torch.tensor([[3, 4, 5]])
    for kwargs, match in [
        ({"beam_size": 0}, "beam_size"),
        ({"early_stopping": "sometimes"}, "early_stopping"),
        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"bad_words": [[3, 99]]}, "bad word"),
    ]:
        with pytest.raises(InputError, match=match):
            beam_search(model, src, 1, 2, **kwargs)


# -- transformers as the oracle ---------------------------------------------------------------
PARITY = ["marian", "bart", "mbart", "pegasus", "t5"]
# the settings each family's folder carries (as real folders of that family do)
GENERATION = {
    "marian": dict(bad_words_ids=[[60]], forced_eos_token_id=0, max_new_tokens=12),
    "bart": dict(forced_bos_token_id=0, forced_eos_token_id=2, max_new_tokens=12),
    "mbart": dict(forced_bos_token_id=7, max_new_tokens=12, suppress_tokens=[9, 11]),
    "pegasus": dict(max_new_tokens=12, min_length=4),
    "t5": dict(max_length=14),
}
# (num_beams, length_penalty, early_stopping, no_repeat_ngram_size, min_length)
SETTINGS = [
    (2, 1.0, False, 0, None),
    (3, 1.0, False, 0, None),
    (4, 0.0, True, 0, None),
    (4, 2.0, "never", 0, None),
    (3, -1.0, False, 2, None),
    (4, 1.0, "never", 3, 6),
    (5, 0.5, True, 1, None),
]


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory):
    """family -> [(transformers model, attnviz checkpoint)] for two random seeds, built on
    first use."""
    from tests.hf_families import build, save

    built: dict[str, list] = {}

    def get(family: str) -> list:
        if family not in built:
            built[family] = []
            for seed in (0, 1):
                model = build(family, seed=seed)
                folder = tmp_path_factory.mktemp(f"{family}{seed}")
                save(model, folder, **GENERATION[family])
                built[family].append((model, attnviz.load_checkpoint(folder)))
        return built[family]

    return get


def source(cfg: attnviz.ModelConfig, seed: int) -> torch.Tensor:
    """``[1, Ts]`` random ids ending with the end id, as these families' tokenizers end input."""
    src = torch.randint(3, 40, (1, 5 + 3 * seed), generator=torch.Generator().manual_seed(seed))
    src[0, -1] = cfg.eos_id
    return src


def generate(hf_model, src, family: str, **settings) -> list[int]:
    with torch.no_grad():
        out = hf_model.generate(
            input_ids=src, attention_mask=torch.ones_like(src), do_sample=False,
            use_cache=family != "t5",  # (see tests/integration/test_hf.py: T5's cache with unequal depths)
            **{k: v for k, v in settings.items() if v is not None},
        )[0, 1:].tolist()  # fmt: skip
    return out


@needs_hf
@pytest.mark.slow
@pytest.mark.parametrize("family", PARITY)
def test_beam_search_equals_transformers(hf_folders, family):
    changed = set()
    for seed, (hf_model, ckpt) in enumerate(hf_folders(family)):
        cfg = ckpt.config
        src = source(cfg, seed)
        for k, lp, early, ngram, min_length in SETTINGS:
            theirs = generate(hf_model, src, family, num_beams=k, length_penalty=lp,
                              early_stopping=early, no_repeat_ngram_size=ngram,
                              min_length=min_length)  # fmt: skip
            rules = ckpt.rules
            if min_length is not None:
                rules = dataclasses.replace(rules, min_new_tokens=min_length - 1)
            ours = beam_search(
                ckpt.model, src, cfg.bos_id, cfg.eos_id, beam_size=k,
                max_len=ckpt.max_new_tokens, rules=rules, length_penalty=lp,
                early_stopping=early, no_repeat_ngram_size=ngram, return_tree=True,
            )[0]  # fmt: skip
            expected = until_eos(theirs, cfg.eos_id, cfg.pad_id)
            assert ours.tokens == expected, (seed, src.tolist(), k, lp, early, ngram)
            check_tree(ours, cfg.eos_id, ckpt.max_new_tokens)
            changed.add(tuple(expected))
    assert len(changed) > 4  # the settings and inputs do change the output


@needs_hf
@pytest.mark.slow
def test_multi_token_bad_words_and_repetition_penalty_equal_transformers(hf_folders):
    hf_model, ckpt = hf_folders("pegasus")[0]
    cfg = ckpt.config
    src = source(cfg, 0)
    free = until_eos(generate(hf_model, src, "pegasus", num_beams=3), cfg.eos_id, cfg.pad_id)
    bad = [free[1:3]]  # a pair the unconstrained search produces
    for settings in ({"bad_words_ids": bad}, {"repetition_penalty": 1.5}):
        theirs = until_eos(generate(hf_model, src, "pegasus", num_beams=3, **settings),
                           cfg.eos_id, cfg.pad_id)  # fmt: skip
        ours = beam_search(
            ckpt.model, src, cfg.bos_id, cfg.eos_id, beam_size=3, max_len=ckpt.max_new_tokens,
            rules=ckpt.rules, bad_words=settings.get("bad_words_ids", ()),
            repetition_penalty=settings.get("repetition_penalty", 1.0),
        )[0]  # fmt: skip
        assert ours.tokens == theirs != free, settings


@needs_hf
@pytest.mark.slow
def test_batched_transformers_rows_equal_one_at_a_time(hf_folders):
    """transformers decodes a padded batch; our search runs each row alone: same tokens."""
    hf_model, ckpt = hf_folders("bart")[0]
    cfg = ckpt.config
    src = torch.randint(3, 40, (3, 7), generator=torch.Generator().manual_seed(3))
    src[1, 4:] = cfg.pad_id
    with torch.no_grad():
        theirs = hf_model.generate(input_ids=src, attention_mask=(src != cfg.pad_id).long(),
                                   num_beams=3, do_sample=False)  # fmt: skip
    ours = beam_search(ckpt.model, src, cfg.bos_id, cfg.eos_id, beam_size=3,
                       max_len=ckpt.max_new_tokens, rules=ckpt.rules)  # fmt: skip
    for row, res in zip(theirs[:, 1:].tolist(), ours, strict=True):
        assert res.tokens == until_eos(row, cfg.eos_id, cfg.pad_id)


@needs_hf
@pytest.mark.slow
def test_predict_follows_the_folders_beam_settings_and_length_limit(tmp_path):
    """``predict`` uses the folder's num_beams, length_penalty, early_stopping, n-gram rule and
    length limit (a Marian folder's beam once ran past its limit), as ``generate()`` does."""
    from tests import hf_families

    tok = hf_families.marian_tokenizer(tmp_path / "tok")
    sizes = {"vocab_size": len(tok), "pad_token_id": tok.pad_token_id,
             "decoder_start_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}  # fmt: skip
    hf_model = hf_families.build("marian", **sizes)
    folder = hf_families.save(
        hf_model, tmp_path / "model", num_beams=3, length_penalty=0.6, early_stopping=True,
        no_repeat_ngram_size=2, max_length=9, bad_words_ids=[[tok.pad_token_id]],
    )  # fmt: skip
    tok.save_pretrained(folder)
    ckpt = attnviz.load_checkpoint(folder)
    texts = ["the cat sat on the mat", "a bird sang", "we walked to the park today"]
    for text in texts:
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            default = hf_model.generate(**enc)  # the folder's own settings: beam 3
            wide = hf_model.generate(**enc, num_beams=5, length_penalty=2.0)
        assert ckpt.predict(text) == tok.decode(default[0], skip_special_tokens=True)
        res = beam_predict(ckpt, text, return_tree=True)
        assert len(res.tokens) <= 8  # max_length 9 counts the start token
        check_tree(res, ckpt.config.eos_id, 8)
        assert beam_predict(ckpt, text, 5, length_penalty=2.0).tokens == until_eos(
            wide[0, 1:].tolist(), ckpt.config.eos_id, ckpt.config.pad_id
        )
    assert ckpt.predict(texts[0], num_beams=1) == ckpt.predict_details(texts[0]).text
    # a setting the search does not follow is refused, not decoded differently
    (folder / "generation_config.json").write_text(
        json.dumps(
            {**json.loads((folder / "generation_config.json").read_text()), "do_sample": True}
        )  # fmt: skip
    )
    with pytest.raises(InputError, match="do_sample"):
        attnviz.load_checkpoint(folder).predict(texts[0])


# -- the command line -----------------------------------------------------------------------------
def test_cli_beam_prints_hypotheses_and_writes_the_tree(models_dir, tmp_path, capsys):
    out = tmp_path / "tree.json"
    code = main(["beam", str(models_dir / "reverse"), "--text", "hello", "--num-beams", "3",
                 "--json", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 0
    assert "output: olleh" in printed and "  1. " in printed
    doc = json.loads(out.read_text())
    assert doc["output"] == "olleh"
    best = doc["nodes"][doc["best"]]
    assert best["finished"] and len(doc["pieces"]) == len(doc["nodes"])
    assert main(["beam", str(models_dir / "reverse"), "--text", "hello", "--num-beams", "0"]) == 2
    assert "beam_size" in capsys.readouterr().err


# -- the fused step and the module path ---------------------------------------------------------
def same_search(fused: list[attnviz.BeamResult], modules: list[attnviz.BeamResult]) -> None:
    """Both paths found the same hypotheses with the same scores and kept the same tree."""
    assert len(fused) == len(modules)
    for a, b in zip(fused, modules, strict=True):
        assert a.tokens == b.tokens
        assert a.score == pytest.approx(b.score, abs=1e-5)
        assert a.normalized_score == pytest.approx(b.normalized_score, abs=1e-5)
        assert [h.tokens for h in a.hypotheses] == [h.tokens for h in b.hypotheses]
        assert [h.score for h in a.hypotheses] == pytest.approx(
            [h.score for h in b.hypotheses], abs=1e-5
        )
        ta, tb = a.tree.nodes, b.tree.nodes
        assert [(n.parent, n.token, n.step, n.finished) for n in ta] == [
            (n.parent, n.token, n.step, n.finished) for n in tb
        ]
        assert [n.score for n in ta] == pytest.approx([n.score for n in tb], abs=1e-5)


@pytest.mark.parametrize(
    "overrides", [{}, {"norm_first": True, "final_norm": True}, {"activation": "gelu"}]
)
def test_fused_and_module_paths_find_the_same_hypotheses(overrides, monkeypatch):
    model = make_model(seed=5, **overrides)
    cfg = model.config
    src = torch.randint(3, 23, (3, 8), generator=torch.Generator().manual_seed(4))
    src[1, 5:] = cfg.pad_id  # a padded row: the cross-attention mask is shared by the beams
    eos = int(greedy_decode(model, src, cfg.bos_id, None, max_len=6)[0, 2])
    calls = []
    import attnviz.core.step

    real = attnviz.core.step.FusedStep.__call__
    monkeypatch.setattr(
        attnviz.core.step.FusedStep, "__call__", lambda self, t: calls.append(1) or real(self, t)
    )
    for settings in (
        {"beam_size": 4},
        {"beam_size": 3, "length_penalty": 2.0, "early_stopping": "never"},
        {"beam_size": 5, "no_repeat_ngram_size": 2, "early_stopping": True},
    ):
        runs = {}
        for fused in (True, False):
            calls.clear()
            runs[fused] = beam_search(
                model, src, cfg.bos_id, eos, max_len=14, return_tree=True, fused=fused, **settings
            )
            assert bool(calls) == fused  # the fused step ran exactly when asked for
        same_search(runs[True], runs[False])
    # recording attends through the fused step's hooks and finds the same search
    plain = beam_search(model, src, cfg.bos_id, eos, max_len=14, return_tree=True)
    calls.clear()
    recorded = beam_search(model, src, cfg.bos_id, eos, max_len=14, return_tree=True,
                           return_attention=True)  # fmt: skip
    assert calls
    same_search(plain, recorded)
    # an edit of the decoder's attention acts inside the fused step as inside the modules
    edit = [attnviz.ZeroHeads("cross", 0, [1])]
    calls.clear()
    edited = beam_search(model, src, cfg.bos_id, eos, max_len=14, return_tree=True, edits=edit)
    assert calls
    same_search(edited, beam_search(model, src, cfg.bos_id, eos, max_len=14, return_tree=True,
                                    edits=edit, fused=False))  # fmt: skip


@needs_hf
@pytest.mark.parametrize("family", ["bart", "t5"])
def test_fused_and_module_paths_agree_on_imported_folders(hf_folders, family):
    """Learned positions and an embedding norm (BART), a position bias and no scaling (T5)."""
    _, ckpt = hf_folders(family)[0]
    cfg = ckpt.config
    src = source(cfg, 1)
    runs = [
        beam_search(
            ckpt.model,
            src,
            cfg.bos_id,
            cfg.eos_id,
            beam_size=4,
            rules=ckpt.rules,
            max_len=ckpt.max_new_tokens,
            return_tree=True,
            fused=fused,
        )  # fmt: skip
        for fused in (True, False)
    ]
    same_search(*runs)


def test_begin_suppression_moves_to_the_second_step_after_a_forced_bos():
    """transformers' rule (checked against generate() in test_hf_generation.py)."""
    logits = torch.arange(6, dtype=torch.float).repeat(2, 1)  # argmax 5
    plain = LogitRules(begin_banned=(5,))
    assert plain.apply(logits, 0, 10).argmax(-1).tolist() == [4, 4]
    assert plain.apply(logits, 1, 10).argmax(-1).tolist() == [5, 5]
    forced = LogitRules(forced_bos_id=1, begin_banned=(5,))
    assert forced.apply(logits, 0, 10).argmax(-1).tolist() == [1, 1]
    assert forced.apply(logits, 1, 10).argmax(-1).tolist() == [4, 4]
    assert forced.apply(logits, 2, 10).argmax(-1).tolist() == [5, 5]
