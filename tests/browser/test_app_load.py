"""Many users at once on one server, and abandoned sessions being freed.

The load test starts ``attnviz app`` on the shipped reversal model in a subprocess (as it is
deployed: its own process, ``demo.queue(default_concurrency_limit=2)``), drives 16
``gradio_client`` sessions in 16 threads against it, checks every reply against a single-user
run of its own input (no state crossing between sessions), and writes the latency numbers to
``load_test.json`` in its temporary folder (``ATTNVIZ_SHOTS=assets`` remakes the README's).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import string
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

from helpers import free_port, shots_folder  # noqa: E402

import attnviz  # noqa: E402  (after the skips)
from attnviz.app import server, ui  # noqa: E402
from attnviz.app.decoders import DECODERS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REVERSE = str(ROOT / "models" / "reverse")
OUTPUT, PAYLOAD = 0, 3  # positions in a decoding event's outputs (the state is not sent)
SESSIONS, CALLS, SEED = 16, 50, 1234


MEMORY_BOUND_MB = 1024  # the stated bound for one server process under this load


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory of a live process (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc")


@contextlib.contextmanager
def app_process(log: Path):
    """``attnviz app`` in a subprocess on a free port; yields (URL, pid) once it accepts."""
    port = free_port()
    code = "import sys; from attnviz.app import server; sys.exit(server.main(sys.argv[1:]))"
    args = ["--model", REVERSE, "--device", "cpu", "--port", str(port), "--no-browser"]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=err, stderr=err, env=env, cwd=ROOT
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, f"the app exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the app did not start:\n{log.read_text()}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve(**build):
    demo = ui.build_app(REVERSE, "cpu", **build)
    demo.queue(default_concurrency_limit=2)  # as `attnviz app` does
    port = free_port()
    demo.launch(prevent_thread_lock=True, **server.launch_kwargs(port=port))
    return demo, f"http://127.0.0.1:{port}/"


def inputs() -> list[str]:
    """One a-z input per session, lengths spread over 3..20."""
    rng = random.Random(SEED)
    lengths = [3 + round(i * 17 / (SESSIONS - 1)) for i in range(SESSIONS)]
    return ["".join(rng.choices(string.ascii_lowercase, k=n)) for n in lengths]


def actions() -> list[str]:
    """Mostly Step, a Back every 4th call; ends on two Steps."""
    return ["back" if i % 4 == 3 else "step" for i in range(CALLS)]


def session(url: str, text: str, expected: str, barrier: threading.Barrier) -> dict:
    """One user: start, then the actions; every reply checked against the expected output."""
    total = len(expected) + 1  # the output tokens, <eos> included
    latencies, errors, mismatches = [], [], []
    client = gradio_client.Client(url, verbose=False)
    barrier.wait()

    def call(name, *args):
        t0 = time.perf_counter()
        try:
            return client.predict(*args, api_name=f"/{name}")
        except Exception as exc:  # counted, then asserted to be none
            errors.append(f"{name}: {exc!r}")
            return None
        finally:
            latencies.append(time.perf_counter() - t0)

    out = call("start", text)
    step = 0
    if out is not None and (out[OUTPUT], out[PAYLOAD]["info"]["step"]) != ("", 0):
        mismatches.append(("start", out[OUTPUT], out[PAYLOAD]["info"]["step"]))
    for i, action in enumerate(actions()):
        out = call(action, text) if action == "step" else call(action)
        step = min(step + 1, total) if action == "step" else max(step - 1, 0)
        if out is None:
            continue
        info = out[PAYLOAD]["info"]
        got = (out[OUTPUT], info["step"], info["done"])
        want = (expected[:step], step, step == total)
        if got != want:
            mismatches.append((i, action, got, want))
    final = (
        None
        if out is None
        else (out[OUTPUT], out[PAYLOAD]["info"]["done"], out[PAYLOAD]["info"].get("newest"))
    )
    return dict(
        text=text,
        latencies=latencies,
        errors=errors,
        mismatches=mismatches,
        final=final,
        final_step=step,
        total=total,
    )


@pytest.mark.slow
def test_sixteen_sessions_at_once(tmp_path):
    texts = inputs()
    assert len(set(texts)) == SESSIONS and {len(t) for t in texts} >= {3, 20}
    ckpt = attnviz.load_checkpoint(REVERSE)
    expected = {t: ckpt.predict(t) for t in texts}
    with app_process(tmp_path / "app.log") as (url, pid):
        barrier = threading.Barrier(SESSIONS)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(SESSIONS) as pool:
            futures = [pool.submit(session, url, t, expected[t], barrier) for t in texts]
            results = [f.result(timeout=300) for f in futures]
        wall = time.perf_counter() - t0
        peak_mb = peak_rss_mb(pid)

    lat_ms = np.array([x for r in results for x in r["latencies"]]) * 1000
    errors = [e for r in results for e in r["errors"]]
    numbers = dict(
        sessions=SESSIONS,
        calls=int(lat_ms.size),
        errors=len(errors),
        p50_ms=round(float(np.percentile(lat_ms, 50)), 1),
        p95_ms=round(float(np.percentile(lat_ms, 95)), 1),
        wall_s=round(wall, 1),
        server_peak_rss_mb=round(peak_mb),
    )
    (shots_folder(tmp_path) / "load_test.json").write_text(json.dumps(numbers, indent=2) + "\n")
    print("load test:", json.dumps(numbers))

    assert numbers["calls"] == SESSIONS * (CALLS + 1)
    assert errors == []
    assert peak_mb < MEMORY_BOUND_MB, f"the server peaked at {peak_mb:.0f} MB"
    for r in results:
        assert r["mismatches"] == [], r["text"]
        # every session ends on its own complete output, as a single user would see it
        assert r["final_step"] == r["total"]
        assert r["final"] == (expected[r["text"]], True, "<eos>")


@pytest.mark.slow
def test_abandoned_session_is_freed():
    demo, url = serve(session_ttl_s=1.5)
    try:
        before = DECODERS.sessions()
        client = gradio_client.Client(url, verbose=False)
        client.predict("abcd", api_name="/start")
        client.predict("abcd", api_name="/step")
        out = client.predict("abcd", api_name="/step")
        assert (out[OUTPUT], out[PAYLOAD]["info"]["step"]) == ("dc", 2)
        mine = DECODERS.sessions() - before
        assert len(mine) == 1  # this session's stepper
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if not mine & DECODERS.sessions():
                break
            time.sleep(0.2)
        assert not mine & DECODERS.sessions(), "the expired session's decoder was not freed"
        # the state went with it: Back now acts on a fresh state, not on step 2
        back = client.predict(api_name="/back")
        assert (back[OUTPUT], back[PAYLOAD]["info"]["step"]) == ("", 0)
    finally:
        demo.close()
