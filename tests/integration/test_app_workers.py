"""A server no file can kill: chosen models run in workers (gradio_client, no browser).

Uploads that abort, exhaust memory or hang take down their own worker only; every other
session's calls succeed with its state kept, the sender reads one line, and a session's
uploads are deleted from disk when it ends.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")
from gradio_client import handle_file  # noqa: E402
from helpers import MODELS, launched_app, zipped  # noqa: E402

from attnviz.app import store, upload_space, workers  # noqa: E402

OUTPUT, STATUS = 0, 1
GB = 1 << 30
pytestmark = pytest.mark.slow


def many_added_tokens(folder: Path, n: int = 100_000) -> Path:
    """A tiny random GPT-2 folder whose tokenizer.json lists ``n`` added tokens."""
    from hf_families import gpt2_text_folder

    folder.mkdir(parents=True, exist_ok=True)
    gpt2_text_folder(folder)
    tj = json.loads((folder / "tokenizer.json").read_text())
    base = len(tj["model"]["vocab"]) + len(tj["added_tokens"])
    tj["added_tokens"] += [
        dict(id=base + i, content=f"tok{i:06d}", single_word=False, lstrip=False, rstrip=False,
             normalized=True, special=False)
        for i in range(n)
    ]  # fmt: skip
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    return folder


@pytest.fixture
def pooled(monkeypatch):
    """Workers on, small: 2 at once, 1.5 GB each, 25 s a request; the crash hook armed for
    uploads named ``crash`` (abort) and ``hog`` (allocate past the limit)."""
    monkeypatch.setenv(workers.CRASH_ENV, "abort:crash")
    limits = workers.Limits(workers=2, memory=int(1.5 * GB), timeout_s=25, idle_s=60)
    workers.configure(limits)
    yield limits
    workers.configure(None)


def steppers(url: str, n: int, stop: threading.Event, errors: list, done: list) -> list:
    """``n`` clients stepping models/reverse (each on its own input) until ``stop``: every
    reply must be the next prefix of the reversed input (their state kept throughout)."""

    def one(i: int) -> None:
        text = "helloworld"[i : i + 3] + "xyz"
        want = text[::-1]
        try:
            c = gradio_client.Client(url, verbose=False)
            c.predict(text, api_name="/start")
            k = 0
            while not stop.is_set() or k == 0:
                out = c.predict(text, api_name="/step")[OUTPUT]
                k = k + 1 if k < len(want) else k
                if k >= len(want):  # <eos> reached: back to the start, step again
                    c.predict(api_name="/reset")
                    k = 0
                    continue
                if out != want[:k]:
                    errors.append(f"client {i}: step {k} showed {out!r}, not {want[:k]!r}")
                    return
            done.append(i)
        except Exception as exc:  # noqa: BLE001 (collected: the test names every failure)
            errors.append(f"client {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads


def test_server_killers_cost_their_sender_one_line(pooled, tmp_path):
    crash = zipped(MODELS / "reverse", tmp_path / "crash.zip")  # the worker os.abort()s
    added = zipped(many_added_tokens(tmp_path / "gpt2"), tmp_path / "added100k.zip")
    with launched_app() as (_, port):
        url = f"http://127.0.0.1:{port}/"
        stop, errors, done = threading.Event(), [], []
        threads = steppers(url, 8, stop, errors, done)
        offender = gradio_client.Client(url, verbose=False)
        t0 = time.monotonic()
        said = offender.predict([handle_file(crash)], "", api_name="/upload")[STATUS]
        assert "\n" not in said and "crash.zip" in said, said
        assert "needed more than 1.5 GB and was stopped" in said, said
        assert "/tmp" not in said and str(store.private_dir("uploads")) not in said
        said = offender.predict([handle_file(added)], "", api_name="/upload")[STATUS]
        # loaded in its worker, refused in one line, or stopped there: never the server
        assert "\n" not in said and "/tmp" not in said, said
        assert offender.predict("abc", api_name="/step")[OUTPUT] in ("c", "")
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        assert sorted(done) == list(range(8))
        assert time.monotonic() - t0 < 120
        # nothing of the refused upload stays on disk
        assert not list(store.private_dir("uploads").glob("*/*/crash"))


def test_a_worker_past_its_memory_limit_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv(workers.CRASH_ENV, "alloc:hog")
    workers.configure(workers.Limits(workers=1, memory=int(1.5 * GB), timeout_s=40))
    try:
        hog = zipped(MODELS / "reverse", tmp_path / "hog.zip")
        with launched_app() as (_, port):
            url = f"http://127.0.0.1:{port}/"
            other = gradio_client.Client(url, verbose=False)
            assert other.predict("abc", api_name="/step")[OUTPUT] == "c"
            said = gradio_client.Client(url, verbose=False).predict(
                [handle_file(hog)], "", api_name="/upload"
            )[STATUS]
            assert "hog.zip" in said and "needed more than 1.5 GB and was stopped" in said
            assert other.predict("abc", api_name="/step")[OUTPUT] == "cb"  # state kept
    finally:
        workers.configure(None)


def test_a_sessions_upload_runs_in_a_worker_and_goes_with_the_session(pooled, tmp_path):
    mine = zipped(MODELS / "reverse", tmp_path / "mine.zip")
    with launched_app(session_ttl_s=3) as (_, port):
        c = gradio_client.Client(f"http://127.0.0.1:{port}/", verbose=False)
        c.predict([handle_file(mine)], "", api_name="/upload")
        assert c.predict("helloworld", api_name="/step")[OUTPUT] == "d"  # in its worker
        (folder,) = [k[0] for k in workers.pool().keys()]
        assert Path(folder).name == "mine" and Path(folder).is_dir()
        assert store.is_shipped(MODELS / "reverse") and not store.is_shipped(folder)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Path(folder).exists():
            time.sleep(0.5)
        assert not Path(folder).exists(), "the ended session's upload is still on disk"
        assert not workers.pool().keys()  # its worker ended with it
        assert "mine" not in store.menu()


def test_uploads_are_refused_past_the_disk_budget(tmp_path, monkeypatch):
    from attnviz.app import session

    monkeypatch.setattr(upload_space, "DISK_BUDGET", 1000)
    z = zipped(MODELS / "reverse", tmp_path / "big.zip")
    view = session.upload_model(session.new_state(), [z])
    assert "space for uploads" in view.message and "/tmp" not in view.message
    shutil.rmtree(tmp_path, ignore_errors=True)
