"""Fine-tuning a checkpoint on a corpus: ``attnviz train --init FOLDER --data ...``."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch

from attnviz import load_checkpoint
from attnviz.cli import main
from attnviz.train.feeds import hf_training_tokenizers
from attnviz.train.snapshots import Snapshots


def _reverse_corpus(path, n: int = 200, seed: int = 0):
    """``n`` reverse pairs of lowercase letters, one ``source<TAB>target`` line each."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        s = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 8)))
        lines.append(f"{s}\t{s[::-1]}")
    path.write_text("\n".join(lines) + "\n")
    return path


def _finetune(init, data, out, *extra) -> int:
    return main(
        ["train", "--init", str(init), "--data", str(data), "--out", str(out), "--steps", "3",
         "--batch-size", "8", "--eval-every", "3", "--eval-size", "8", "--snapshot-every", "1",
         "--warmup", "1", "--lr", "1e-5", "--device", "cpu", "--quiet", *extra]
    )  # fmt: skip


@pytest.fixture(scope="module")
def tuned(models_dir, tmp_path_factory):
    """models/reverse fine-tuned for 3 steps on a reverse corpus written here."""
    tmp = tmp_path_factory.mktemp("finetune")
    data = _reverse_corpus(tmp / "train.tsv")
    out = tmp / "run"
    assert _finetune(models_dir / "reverse", data, out) == 0
    return out


def test_a_fine_tuned_checkpoint_loads_predicts_and_keeps_tokenizers(models_dir, tuned):
    before, after = load_checkpoint(models_dir / "reverse"), load_checkpoint(tuned)
    assert after.config == before.config
    assert after.src_tokenizer.to_dict() == before.src_tokenizer.to_dict()
    assert after.tgt_tokenizer.to_dict() == before.tgt_tokenizer.to_dict()
    assert after.meta["init"]["path"] == str(models_dir / "reverse")
    assert after.meta["step"] == 3
    # it started from the folder's weights: 3 small steps move them only a little
    old, new = before.model.state_dict(), after.model.state_dict()
    assert old.keys() == new.keys()
    for name in old:
        assert (old[name] - new[name]).abs().max() < 0.01, name
    assert any(not torch.equal(old[name], new[name]) for name in old)
    assert after.predict("abcdef") == before.predict("abcdef") == "fedcba"


def test_snapshots_record_the_probe_during_fine_tuning(tuned):
    snaps = Snapshots.load(tuned)
    assert snaps.steps == [0, 1, 2, 3]
    assert (tuned / "dev_pairs.json").is_file()


def test_a_fine_tuned_checkpoint_opens_in_the_app_with_its_playback(tuned):
    from attnviz.app import session
    from attnviz.app.panels import playback as playback_panel

    done = session.run(session.new_state(str(tuned)), "abcdef").state
    assert session.goto(done, 7).output == "fedcba"
    assert playback_panel.playback_steps(done) == [0, 1, 2, 3]


def test_compare_shows_what_fine_tuning_changed(models_dir, tuned, tmp_path, capsys):
    out_json = tmp_path / "c.json"
    code = main(["compare", str(models_dir / "reverse"), str(tuned), "--text", "abcdef",
                 "--json", str(out_json)])  # fmt: skip
    assert code == 0
    assert "agree on 1 of 1" in capsys.readouterr().out
    grid = json.loads(out_json.read_text())["divergence"]["cross"]
    assert all(0 <= x < 0.05 for row in grid for x in row)
    assert any(x > 0 for row in grid for x in row)


def test_resume_carries_on_a_fine_tuning_run(models_dir, tmp_path):
    data = _reverse_corpus(tmp_path / "train.tsv")
    out = tmp_path / "run"
    assert _finetune(models_dir / "reverse", data, out) == 0
    code = main(["train", "--resume", "--out", str(out), "--steps", "5", "--quiet",
                 "--device", "cpu"])  # fmt: skip
    assert code == 0
    ck = load_checkpoint(out)
    assert ck.meta["kept"]["last_step"] == 5
    assert ck.meta["init"]["path"] == str(models_dir / "reverse")


def test_a_bad_init_folder_is_one_line(tmp_path, capsys):
    data = _reverse_corpus(tmp_path / "train.tsv", n=20)
    assert _finetune(tmp_path / "nothing", data, tmp_path / "run") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nothing" in err
    assert not (tmp_path / "run").exists()


def test_model_and_tokenizer_options_are_refused(models_dir, tmp_path, capsys):
    data = _reverse_corpus(tmp_path / "train.tsv", n=20)
    assert _finetune(models_dir / "reverse", data, tmp_path / "run", "--d-model", "64",
                     "--vocab-size", "100") == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--d-model, --vocab-size" in err
    code = main(["train", "--init", str(models_dir / "reverse"), "--task", "reverse", "--quiet"])
    assert code == 2
    assert "--data" in capsys.readouterr().err


@pytest.fixture(scope="module")
def hf_tuned(tmp_path_factory):
    """(transformers tokenizer, Marian folder, run): a tiny random Marian folder with its own
    tokenizer (target side too), fine-tuned for 3 steps on a corpus written here."""
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from tests import hf_families

    tmp = tmp_path_factory.mktemp("hf_finetune")
    tok = hf_families.marian_tokenizer(tmp / "tok", target=True)
    ids = {"pad_token_id": tok.pad_token_id, "decoder_start_token_id": tok.pad_token_id,
           "eos_token_id": tok.eos_token_id}  # fmt: skip
    hf_model = hf_families.build("marian", vocab_size=len(tok), **ids)
    hf_model.generation_config.max_new_tokens = 6
    folder = tmp / "marian"
    hf_model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    pairs = zip(hf_families.CORPUS, hf_families.TARGET_CORPUS, strict=True)
    data = tmp / "train.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    out = tmp / "run"
    assert _finetune(folder, data, out, "--lr", "1e-3") == 0
    return tok, folder, out


def _hf_text() -> str:
    from tests import hf_families

    return hf_families.CORPUS[0]


def test_a_fine_tuned_hf_folder_keeps_its_config_files_and_rules(hf_tuned):
    _, folder, out = hf_tuned
    before, after = load_checkpoint(folder), load_checkpoint(out)
    assert after.config == before.config and after.meta["model_type"] == "marian"
    assert (out / "generation_config.json").is_file() and (out / "target.spm").is_file()
    assert after.max_new_tokens == before.max_new_tokens == 6
    assert after.rules == before.rules
    assert isinstance(after.predict(_hf_text()), str)


def test_a_fine_tuned_hf_folder_moved_its_weights(hf_tuned):
    _, folder, out = hf_tuned
    old, new = load_checkpoint(folder).model.state_dict(), load_checkpoint(out).model.state_dict()
    assert old.keys() == new.keys()
    assert any(not torch.equal(old[k], new[k]) for k in old)


def test_a_fine_tuned_hf_folder_keeps_its_tokenizers(hf_tuned):
    tok, folder, out = hf_tuned
    before, after = load_checkpoint(folder), load_checkpoint(out)
    assert after.src_tokenizer == before.src_tokenizer
    assert after.tgt_tokenizer == before.tgt_tokenizer
    assert after.src_tokenizer.encode(_hf_text()).ids == tok(_hf_text()).input_ids


def test_training_reads_an_hf_target_without_its_end_id(hf_tuned):
    """The target without transformers' end id (a batch appends the model's), the source
    with it (as predict reads it)."""
    from tests import hf_families

    tok, folder, _ = hf_tuned
    before = load_checkpoint(folder)
    src, tgt = hf_training_tokenizers(before.src_tokenizer, before.tgt_tokenizer)
    german = hf_families.TARGET_CORPUS[0]
    assert tgt.encode(german).ids == tok(text_target=german).input_ids[:-1]
    assert src.encode(_hf_text()).ids == tok(_hf_text()).input_ids
    flat, lengths = tgt.encode_flat([german, german])
    assert flat.tolist() == 2 * tok(text_target=german).input_ids[:-1]
    assert lengths.tolist() == [len(tok(text_target=german).input_ids) - 1] * 2


def test_compare_shows_what_fine_tuning_an_hf_folder_changed(hf_tuned, capsys):
    _, folder, out = hf_tuned
    capsys.readouterr()
    assert main(["compare", str(folder), str(out), "--text", _hf_text()]) == 0
    assert "agree on" in capsys.readouterr().out


def test_a_fine_tuned_hf_folder_opens_in_the_app_with_its_playback(hf_tuned):
    from attnviz.app import session
    from attnviz.app.panels import playback as playback_panel

    _, _, out = hf_tuned
    done = session.run(session.new_state(str(out)), _hf_text())
    assert done.state.done and done.output == load_checkpoint(out).predict_details(_hf_text()).text
    assert playback_panel.playback_steps(done.state) == [0, 1, 2, 3]


def test_a_fine_tuned_hf_run_resumes_without_the_original_folder(hf_tuned, tmp_path):
    _, folder, out = hf_tuned
    after = load_checkpoint(out)
    run = tmp_path / "run"
    shutil.copytree(out, run)  # the module's run stays at step 3 for the tests above
    aside = tmp_path / "aside"
    shutil.move(folder, aside)  # it needs nothing from the original folder
    try:
        code = main(["train", "--resume", "--out", str(run), "--steps", "4", "--quiet",
                     "--device", "cpu"])  # fmt: skip
    finally:
        shutil.move(aside, folder)
    assert code == 0
    again = load_checkpoint(run)
    assert again.meta["kept"]["last_step"] == 4 and again.tgt_tokenizer == after.tgt_tokenizer
    assert again.rules == after.rules and isinstance(again.predict(_hf_text()), str)


def test_only_a_fine_tuned_folders_metadata_is_taken_for_one(tmp_path, models_dir):
    from attnviz.interop.hf import is_finetuned_hf

    assert not is_finetuned_hf(models_dir / "reverse")
    for text in ("[1, 2]", "not json", '{"format": "attnviz-checkpoint/1", "src_tokenizer": 3}'):
        (tmp_path / "config.json").write_text(text)
        assert not is_finetuned_hf(tmp_path)
