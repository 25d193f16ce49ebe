"""The app served in-process and driven through its named API with gradio_client."""

from __future__ import annotations

import pytest

pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

from helpers import launched_app  # noqa: E402

from attnviz.app import server  # noqa: E402

# positions in a decoding event's outputs (the state is not sent)
OUTPUT, STATUS, PAYLOAD = 0, 1, 3


@pytest.fixture(scope="module")
def url():
    with launched_app() as (_, port):
        yield f"http://127.0.0.1:{port}/"


@pytest.fixture
def client(url):
    return gradio_client.Client(url, verbose=False)


def test_named_endpoints(client):
    named = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    assert {"/start", "/step", "/run", "/back", "/reset"} <= set(named)


def test_start_then_step_until_done(client):
    out = client.predict("helloworld", api_name="/start")
    assert (
        out[OUTPUT] == "" and out[PAYLOAD]["info"]["step"] == 0 and not out[PAYLOAD]["info"]["done"]
    )
    seen = []
    for _ in range(30):
        out = client.predict("helloworld", api_name="/step")
        seen.append(out[OUTPUT])
        if out[PAYLOAD]["info"]["done"]:
            break
    assert out[OUTPUT] == "dlrowolleh" and out[PAYLOAD]["info"]["newest"] == "<eos>"
    assert seen[:2] == ["d", "dl"]
    back = client.predict(api_name="/back")
    assert back[PAYLOAD]["info"]["step"] == len(seen) - 1
    reset = client.predict(api_name="/reset")
    assert reset[OUTPUT] == "" and reset[PAYLOAD]["info"]["step"] == 0


def test_run_and_sessions_are_separate(url):
    a = gradio_client.Client(url, verbose=False)
    b = gradio_client.Client(url, verbose=False)
    ran = a.predict("abc", api_name="/run")
    assert ran[OUTPUT] == "cba" and ran[PAYLOAD]["info"]["step"] == 4  # c, b, a, <eos>
    assert b.predict("xyz", api_name="/step")[OUTPUT] == "z"
    back = a.predict(api_name="/back")  # a's state untouched by b's step
    assert (
        back[OUTPUT] == "cba"
        and back[PAYLOAD]["info"]["step"] == 3
        and not back[PAYLOAD]["info"]["done"]
    )
    bad = b.predict("", api_name="/start")
    assert "empty" in bad[STATUS]


def test_main_refuses_a_bad_model(tmp_path, capsys):
    assert server.main(["--model", str(tmp_path / "nope"), "--no-browser"]) == 2
    assert "attnviz app:" in capsys.readouterr().err
