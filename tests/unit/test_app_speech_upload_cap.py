"""The upload cap: ``attnviz app --max-upload`` (default 2 GB, not gradio's 200 MB) reaches
``launch`` and the page says it beside the upload, with what to do for a larger model."""

from __future__ import annotations

import pytest

from attnviz.app import filekinds, server


@pytest.mark.parametrize(
    "text, n",
    [("2gb", 2 * 1024**3), ("500 MB", 500 * 1024**2), ("1.5GB", 3 * 1024**3 // 2), ("4096", 4096)],
)
def test_sizes_read(text, n):
    assert filekinds.upload_bytes(text) == n


@pytest.mark.parametrize("text", ["", "lots", "2 parsecs", "-1gb", "0", "inf", "nan"])
def test_bad_sizes_are_one_line(text):
    with pytest.raises(ValueError, match="not a size|above 0"):
        filekinds.upload_bytes(text)


def test_size_labels():
    assert [filekinds.size_label(n) for n in (2 * 1024**3, 500 * 1024**2, 3 * 1024**3 // 2)] == [
        "2 GB", "500 MB", "1.5 GB",
    ]  # fmt: skip


def test_the_default_cap_is_two_gigabytes():
    assert server.parser().parse_args([]).max_upload == "2gb"
    assert server.launch_kwargs()["max_file_size"] == 2 * 1024**3


def test_max_upload_reaches_launch_and_the_page(monkeypatch):
    pytest.importorskip("gradio")
    from attnviz.app import ui

    seen: dict = {}

    class Demo:
        def queue(self, **kw):
            return self

        def launch(self, **kw):
            seen["launch"] = kw

    def build(model, device, **kw):
        seen["build"] = kw
        return Demo()

    monkeypatch.setattr(ui, "build_app", build)
    assert server.main(["--device", "cpu", "--no-browser", "--max-upload", "8gb"]) == 0
    assert seen["launch"]["max_file_size"] == 8 * 1024**3
    assert seen["build"]["max_upload"] == "8gb"


def test_a_bad_max_upload_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit, match="^2$"):  # argparse's usage error
        server.parser().parse_args(["--max-upload", "lots"])
    assert "not a size" in capsys.readouterr().err


def test_the_page_says_the_cap_near_the_upload():
    pytest.importorskip("gradio")
    from attnviz.app import ui

    demo = ui.build_app(None, "cpu", max_upload="500mb")
    (help_,) = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "upload-help"]
    assert "500 MB" in help_.value and "--max-upload" in help_.value
    assert "--model PATH" in help_.value
