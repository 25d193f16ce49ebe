"""The Hugging Face import's place in the layering: checkpoint does not import interop (the
folder format registers itself; tests/unit/test_layout.py holds every layer to its imports and
every module to public names)."""

from __future__ import annotations


def test_hf_folders_open_through_the_registered_format():
    from attnviz.checkpoint import FOLDER_FORMATS
    from attnviz.interop.hf import is_hf_folder, load_hf_checkpoint

    assert (is_hf_folder, load_hf_checkpoint) in FOLDER_FORMATS
