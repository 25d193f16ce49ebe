"""Settings that lie or ask too much, refused in one line: a run folder whose training state
lies to ``--resume`` (a negative or textual step, a textual elapsed time, a junk history, no
options, lr NaN, label smoothing 5, a 5,000-digit number in its header), and a batch size whose
activations no memory holds (``--batch-size 1000000000`` ran 127 s to 2.9 GB)."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from attnviz.cli import main
from attnviz.core.errors import AttnvizError
from attnviz.train.loop import TRAIN_STATE, TrainOptions, train

pytestmark = pytest.mark.slow


def _tiny(out: str, **kw) -> TrainOptions:
    base = dict(task="copy", d_model=32, n_heads=2, d_ff=64, batch_size=16, eval_size=20,
                snapshot_every=5, eval_every=10, steps=10, out=out)  # fmt: skip
    return TrainOptions(**{**base, **kw})


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostile-run") / "run"
    train(_tiny(str(out)), progress=False)
    return out


def _lie(run, folder, change) -> None:
    """``folder``: a copy of ``run`` whose training state's metadata went through ``change``
    (a function of the metadata dict returning it, or the raw header text)."""
    shutil.copytree(run, folder)
    path = folder / TRAIN_STATE
    with safe_open(str(path), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = json.loads(f.metadata()["attnviz"])
    new = change(meta)
    save_file(
        tensors, str(path), metadata={"attnviz": new if isinstance(new, str) else json.dumps(new)}
    )


def _with(**kw):
    return lambda meta: {**meta, **kw}


def _options(**kw):
    return lambda meta: {**meta, "options": {**meta["options"], **kw}}


LIES = {
    "step -5": (_with(step=-5), "step is -5, not a count"),
    "step x": (_with(step="x"), "step is 'x', not a count"),
    "elapsed x": (_with(elapsed="x"), "elapsed time is 'x'"),
    "junk history": (_with(history="junk"), "history is not a list of validations"),
    "history of strings": (_with(history=[{"step": 1, "val_loss": "x", "x": [1]}]), "history"),
    "no options": (lambda meta: {k: v for k, v in meta.items() if k != "options"}, "no options"),
    "lr NaN": (_options(lr=float("nan")), "--lr must be positive"),
    "label smoothing 5": (_options(label_smoothing=5), "--label-smoothing must be"),
    "batch size as text": (_options(batch_size="x"), "--batch-size must be at least 1"),
    "5,000 digits": (lambda meta: json.dumps(meta)[:-1] + ', "n": ' + "9" * 5000 + "}",
                     "not JSON"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(LIES))
def test_a_training_state_that_lies_is_one_line(saved_run, tmp_path, capsys, name):
    change, says = LIES[name]
    folder = tmp_path / "run"
    _lie(saved_run, folder, change)
    with pytest.raises(AttnvizError, match=says):
        train(TrainOptions(task="copy", out=str(folder), steps=20, resume=True), progress=False)
    capsys.readouterr()
    code = main(["train", "--task", "copy", "--out", str(folder), "--steps", "20", "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert len(err) < 400, err


def test_a_batch_no_memory_holds_is_refused_before_anything_is_built(tmp_path, capsys):
    with pytest.raises(
        AttnvizError, match=r"--batch-size 1,000,000,000 would hold at least .* fit"
    ):
        train(_tiny(str(tmp_path / "a"), batch_size=10**9), progress=False)
    code = main(["train", "--task", "copy", "--out", str(tmp_path / "b"),
                 "--batch-size", "1000000000", "--steps", "5"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "at most" in err and "Traceback" not in err
    assert not (tmp_path / "b").exists()  # refused before the run folder was made
