"""The server's per-session decoders under a byte budget, and a session's upload replaced."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from helpers import MODELS, zipped

from attnviz.app import session, uploads
from attnviz.app.decoders import DecoderCache, held_bytes
from attnviz.app.state import new_state
from attnviz.app.store import get_checkpoint


def test_steppers_are_evicted_least_recently_used_to_fit_the_byte_budget():
    ckpt = get_checkpoint(MODELS / "reverse")
    cache = DecoderCache(budget=1 << 40)  # measured, nothing evicted yet
    states = []
    for i, text in enumerate(("helloworld", "abcdefgh", "zyxwvu")):
        s = session.start(new_state(str(MODELS / "reverse")), text).state
        s = dataclasses.replace(s, sid=f"{i:08x}")
        with cache.hold(s, ckpt, s.version) as stepper:
            s = dataclasses.replace(s, tokens=stepper.run())
            size = held_bytes(stepper)
        states.append((s, size))
    assert all(size > 10_000 for _, size in states)  # recorded rows, KV cache, encoder trace
    cache.budget = states[1][1] + states[2][1] + 1  # room for two of the three
    with cache.hold(states[2][0], ckpt, states[2][0].version) as stepper:
        pass
    assert cache.sessions() == {"00000001", "00000002"}  # the least recently used went
    assert cache.held() <= cache.budget
    s0 = states[0][0]
    with cache.hold(s0, ckpt, s0.version) as stepper:  # it comes back: rebuilt on its tokens
        assert stepper.tokens == s0.tokens and stepper.encoder_trace is not None
    assert "00000000" in cache.sessions() and cache.held() <= cache.budget


def test_a_sessions_new_upload_deletes_its_previous_one(tmp_path):
    first = session.upload_model(
        session.new_state(), [zipped(MODELS / "reverse", tmp_path / "one.zip")]
    )
    sid = first.state.sid
    assert uploads.owned(sid) == {Path(first.state.model)}
    second = session.upload_model(first.state, [zipped(MODELS / "reverse", tmp_path / "two.zip")])
    assert second.state.sid == sid and second.state.model != first.state.model
    assert not Path(first.state.model).exists()
    uploads.end_session(sid)
    assert not Path(second.state.model).exists()
