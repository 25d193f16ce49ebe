"""The speech input's words on the page, without a model: an example is known by its bytes
(gradio copies it into its cache), what it says is shown beside it, and a clip is named by its
file name alone, in the line under it and in the messages about it."""

from __future__ import annotations

import shutil

import pytest

from attnviz.app import speech
from attnviz.core.errors import InputError

HELLO = speech.EXAMPLES_DIR / "hello_world.wav"


def test_every_example_says_its_text():
    for path in speech.examples():
        assert speech.example_says(speech.example_name(path)), path
    assert speech.example_says("hello world") == "Hello world, this is a test."
    assert speech.example_says("no such clip") == ""


def test_an_example_copied_elsewhere_is_known_by_its_bytes(tmp_path):
    copy = tmp_path / "0a1b2c" / "hello_world.wav"  # as gradio caches it
    copy.parent.mkdir()
    shutil.copyfile(HELLO, copy)
    assert speech.example_of(str(copy)) == "hello world"
    other = tmp_path / "hello_world.wav"  # the same name, other bytes: an upload
    other.write_bytes(HELLO.read_bytes()[:-2] + b"\x00\x01")
    assert speech.example_of(str(other)) is None
    assert speech.example_of(None) is None and speech.example_of("") is None


def test_the_line_under_the_clip_names_the_file_only(tmp_path):
    copy = tmp_path / "gradio" / "f00d" / "hello_world.wav"
    copy.parent.mkdir(parents=True)
    shutil.copyfile(HELLO, copy)
    note = speech.clip_note(str(copy))
    assert "hello_world.wav" in note and "Hello world, this is a test." in note
    assert str(tmp_path) not in note and "gradio" not in note
    assert "No clip" in speech.clip_note(None)


def test_a_refused_clip_is_named_by_its_file_name(tmp_path):
    bad = tmp_path / "deep" / "notes.wav"
    bad.parent.mkdir()
    bad.write_text("no sound here")
    with pytest.raises(InputError, match=r"notes\.wav") as err:
        speech.store_clip(str(bad))
    assert "notes.wav" in str(err.value) and str(tmp_path) not in str(err.value)
    with pytest.raises(InputError, match=r"^no audio file at gone\.wav$"):
        speech.store_clip(str(tmp_path / "gone.wav"))
