"""What the app exposes on the network: no file outside its own, loopback only, warnings.

Paths are sent byte for byte with ``http.client`` (``httpx`` and ``urllib`` would normalise
``..`` and some escapes away before the server saw them).
"""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

pytest.importorskip("gradio")

from helpers import launched_app

from attnviz.app import server as app_server
from attnviz.app import ui

ROOT = Path(__file__).resolve().parents[2]
REVERSE = ROOT / "models" / "reverse"
PASSWD = Path("/etc/passwd")


@pytest.fixture(scope="module")
def server():
    with launched_app() as running:
        yield running


def get(port: int, path: str) -> tuple[int, bytes]:
    """``GET path`` exactly as written (no client-side normalisation), following nothing."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def secrets() -> dict[str, tuple[str, bytes]]:
    """Files the app must not serve -> (absolute path, bytes that prove it was served)."""
    out = {
        "passwd": (str(PASSWD), b"root:"),
        "config": (str(REVERSE / "config.json"), b"attnviz-checkpoint/1"),
        "weights": (str(REVERSE / "model.safetensors"), b"__metadata__"),
        "source": (str(ROOT / "attnviz" / "app" / "ui.py"), b"def build_app"),
        "project": (str(ROOT / "pyproject.toml"), b"[project]"),
    }
    return {k: v for k, v in out.items() if Path(v[0]).is_file()}


def attacks() -> list[tuple[str, bytes]]:
    """(request path, marker) for every way of asking for a file outside the app's own."""
    out = []
    for path, marker in secrets().values():
        rel = path.lstrip("/")
        enc = path.replace("/", "%2F")
        ups = "../" * 12
        win = "..\\" * 12 + rel.replace("/", "\\")
        for p in (
            f"/gradio_api/file={path}",
            f"/file={path}",
            f"/gradio_api/file/{rel}",
            f"/gradio_api/file=//{rel}",
            f"/gradio_api/file={enc}",
            f"/gradio_api/file={enc.replace('%', '%25')}",  # double-encoded
            f"/gradio_api/file={ups}{rel}",
            f"/gradio_api/file={ups.replace('/', '%2F')}{rel}",
            f"/gradio_api/file={ups.replace('..', '%2e%2e')}{rel}",
            f"/gradio_api/file=/tmp/gradio/{ups}{rel}",  # out of the upload dir
            f"/gradio_api/file=.gradio/cached_examples/{ups}{rel}",  # out of the cache
            f"/gradio_api/file={win}",
            f"/static/{ups}{rel}",
            f"/static/{ups.replace('/', '%2F')}{rel}",
            f"/assets/{ups.replace('/', '%2F')}{rel}",
            f"/assets/{ups.replace('..', '%2e%2e')}{rel}",
            f"/gradio_api/file=file://{path}",
        ):
            out.append((p, marker))
    for rel, marker in (
        ("models/reverse/config.json", b"attnviz-checkpoint/1"),
        ("pyproject.toml", b"[project]"),
        ("attnviz/app/ui.py", b"def build_app"),
    ):  # relative to the server's working directory
        out.append((f"/gradio_api/file={rel}", marker))
        out.append((f"/gradio_api/file=./{rel}", marker))
    return out


def test_the_checks_can_see_a_served_file(server):
    """Controls: the same requests do read what gradio may serve (an upload of this session)."""
    import httpx

    _, port = server
    status, body = get(port, "/config")
    assert status == 200 and b"max_file_size" in body
    up = httpx.post(
        f"http://127.0.0.1:{port}/gradio_api/upload",
        files={"files": ("probe.txt", b"attnviz upload probe")},
        timeout=30,
    )
    assert up.status_code == 200
    assert get(port, f"/gradio_api/file={up.json()[0]}") == (200, b"attnviz upload probe")


@pytest.mark.parametrize("path,marker", attacks(), ids=lambda x: str(x)[:70])
def test_no_file_outside_the_app_is_served(server, path, marker):
    _, port = server
    status, body = get(port, path)
    assert marker not in body, f"{path} served the file (HTTP {status})"
    assert status in (400, 403, 404, 405, 422), f"{path}: HTTP {status}"


def test_no_ssrf_through_the_file_or_proxy_routes(server):
    _, port = server
    inner = f"http://127.0.0.1:{port}/config"
    for path in (f"/gradio_api/file={inner}", f"/gradio_api/proxy={inner}"):
        status, body = get(port, path)
        assert status in (400, 403), f"{path}: HTTP {status}"
        assert b"max_file_size" not in body


def test_binds_loopback_only_and_limits_uploads(server):
    demo, port = server
    assert app_server.launch_kwargs()["server_name"] == "127.0.0.1"
    assert demo.server_name == "127.0.0.1"
    assert app_server.MAX_FILE_SIZE == "2gb"
    assert app_server.launch_kwargs()["max_file_size"] == demo.max_file_size == 2 * 1024**3
    assert app_server.launch_kwargs()["share"] is False
    assert not app_server.launch_kwargs().get("allowed_paths")
    # the sockets the server listens on: loopback only
    bound = [sock.getsockname()[:2] for srv in demo.server.servers for sock in srv.sockets]
    assert bound and all(addr == ("127.0.0.1", port) for addr in bound)


class FakeDemo:
    def __init__(self, calls: list, capsys):
        self.calls, self.capsys = calls, capsys

    def queue(self, **kwargs):
        self.calls.append(("queue", kwargs))
        return self

    def launch(self, **kwargs):
        # what was printed before launching (warnings must come first)
        self.calls.append(("launch", kwargs, self.capsys.readouterr().err))


@pytest.fixture
def fake_launch(monkeypatch, capsys):
    calls: list = []
    monkeypatch.setattr(ui, "build_app", lambda model, device, **kw: FakeDemo(calls, capsys))
    return calls


def run_main(calls: list, *args: str) -> tuple[dict, str]:
    assert app_server.main(["--model", str(REVERSE), "--device", "cpu", "--no-browser", *args]) == 0
    (_, kwargs, err) = next(c for c in calls if c[0] == "launch")
    return kwargs, err


def test_default_launch_is_local_and_quiet(fake_launch):
    kwargs, err = run_main(fake_launch)
    assert kwargs["server_name"] == "127.0.0.1" and kwargs["share"] is False
    assert kwargs["max_file_size"] == 2 * 1024**3
    assert "WARNING" not in err


def test_share_warns_on_stderr_before_launching(fake_launch):
    kwargs, err = run_main(fake_launch, "--share")
    assert kwargs["share"] is True
    assert kwargs["server_name"] == "127.0.0.1"  # sharing does not widen the binding
    assert "WARNING" in err and "PUBLIC on the internet" in err and "gradio.live" in err


def test_a_wider_host_warns_too(fake_launch):
    kwargs, err = run_main(fake_launch, "--host", "0.0.0.0")
    assert kwargs["server_name"] == "0.0.0.0" and kwargs["share"] is False
    assert "reachable from other machines" in err and "PUBLIC" not in err


def test_exposure_warnings():
    assert app_server.exposure_warnings("127.0.0.1", False) == []
    assert app_server.exposure_warnings("localhost", False) == []
    assert app_server.exposure_warnings("127.0.0.1", True) == [app_server.SHARE_WARNING]
    assert len(app_server.exposure_warnings("0.0.0.0", True)) == 2


def test_no_usage_analytics(server):
    demo, _ = server
    assert demo.analytics_enabled is False
