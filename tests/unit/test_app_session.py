"""The app's session layer without a browser: decoding actions, views, labs, uploads."""

from __future__ import annotations

import base64
import copy
import dataclasses
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attnviz
from attnviz.app import session, store, unpack, views
from attnviz.app import state as app_stamps
from attnviz.app.decoders import DECODERS, DecoderCache
from attnviz.app.panels import export as export_panel
from attnviz.app.panels import health as health_panel
from attnviz.app.panels import labs
from attnviz.app.panels import playback as playback_panel

EOS = 2  # the built-in models' end id (ckpt.config.eos_id); test_special_ids covers others


@pytest.fixture
def fresh(models_dir) -> session.SessionState:
    return session.new_state(str(models_dir / "reverse"))


@pytest.fixture(scope="module")
def done(models_dir) -> session.SessionState:
    """helloworld decoded to the end on the shipped reversal model."""
    return session.run(session.new_state(str(models_dir / "reverse")), "helloworld").state


def _walk(value):
    """Every leaf of a (dataclass / dict / list) state."""
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _walk(getattr(value, f.name))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _walk(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _walk(v)
    else:
        yield value


# -- step-through decoding -------------------------------------------------------------------------
def test_step_to_eos_reverses_helloworld(fresh):
    view = session.start(fresh, "helloworld")
    assert view.state.step == 0 and view.output == "" and not view.state.done
    s, outputs = view.state, []
    for _ in range(30):
        view = session.step(s)
        s = view.state
        outputs.append(view.output)
        if s.done:
            break
    assert view.output == "dlrowolleh"
    assert s.tokens[-1] == EOS and s.step == len("helloworld") + 1
    assert outputs[:3] == ["d", "dl", "dlr"]  # one token per step
    assert view.info["done"] and view.info["newest"] == "<eos>"
    assert view.payload["tokens"][-1] == "<eos>" and "Done" in view.message
    again = session.step(s)  # past EOS: refused with a message, state kept
    assert again.state == s and "complete" in again.message


def test_step_starts_on_typed_text_and_restarts_when_it_changes(fresh):
    view = session.step(fresh, "abc")
    assert view.output == "c" and view.state.text == "abc"
    view = session.step(view.state, "xyz")  # new text: decoding starts over on it
    assert view.output == "z" and view.state.step == 1


def test_back_reset_goto_and_replay(done):
    n = done.step
    back = session.back(done)
    assert back.state.step == n - 1 and back.output == "dlrowolleh"  # EOS hidden again
    assert back.state.tokens == done.tokens  # history kept: stepping on replays it
    assert session.step(back.state).state == done
    assert session.goto(done, 3).output == "dlr"
    assert session.goto(done, 99).state.step == n  # clamped
    reset = session.reset(done)
    assert reset.state.step == 0 and reset.state.tokens == [] and reset.output == ""
    assert session.back(reset.state).state.step == 0


def test_rebuilt_stepper_gives_the_same_view(done):
    before = session.goto(done, 4)
    DECODERS.forget(done.sid)  # evicted (or another worker): rebuilt by forcing
    assert done.sid not in DECODERS.sessions()
    after = session.goto(done, 4)
    for kind in ("decoder_self", "cross"):
        a, b = before.figures[kind].data[0].z, after.figures[kind].data[0].z
        np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), equal_nan=True)


def test_state_is_small_deep_copyable_and_holds_no_model(done):
    leaves = list(_walk(done))
    assert not any(isinstance(x, torch.Tensor | torch.nn.Module) for x in leaves)
    assert copy.deepcopy(done) == done
    assert len(json.dumps(dataclasses.asdict(done))) < 2000


def test_input_problems_come_back_as_messages(fresh):
    empty = session.step(fresh, "   ")
    assert "empty" in empty.message and not empty.state.started
    too_long = session.step(fresh, "a" * 500)
    assert "at most" in too_long.message and not too_long.state.started
    nothing = session.step(fresh)
    assert "type an input" in nothing.message
    unk = session.step(fresh, "heLLo")
    assert unk.state.unknown == ["L"] and "&lt;unk&gt;" in unk.message
    assert unk.payload["unk"] == [2, 3] and unk.payload["src"][2] == "<unk>"
    longer = session.start(fresh, "abcdefghijklmnopqrstuvwxyz")  # trained on lengths 1-20
    assert "longer than anything" in longer.message


def test_figures_show_masks_tokens_and_views(done):
    view = session.goto(done, 5)
    dec = view.figures["decoder_self"]
    assert [t.name for t in dec.data] == ["weights", "masked"]  # causal mask drawn grey
    assert list(dec.layout.yaxis.ticktext) == ["&lt;bos&gt;", "d", "l", "r", "o"]
    assert np.asarray(view.figures["cross"].data[0].z).shape == (5, 10)
    assert view.figures["topk"].data[0].type == "bar"
    grid = session.set_view(done, "cross", "L0", "all heads")
    assert grid.state.view["cross"] == [0, "all heads"]
    assert len(grid.figures["cross"].data) == 4  # one panel per head
    one = session.open_head(done, "encoder_self L1 H2")
    assert one.state.view["encoder_self"] == [1, "H2"]
    assert "head 2" in one.figures["encoder_self"].layout.title.text
    assert (
        "layers × heads"
        in session.set_model_kind(done, "decoder_self").figures["model"].layout.title.text
    )
    assert "beam" in session.beam(done).lower()


# -- mask lab, ablation, attribution ----------------------------------------------------------------
def test_mask_lab_toggles_change_weights_and_report_output(done):
    plain = labs.mask_lab(done)
    diff = np.asarray(plain.figures[0].data[-1].z, float)
    assert np.nanmax(np.abs(diff)) == 0 and "nothing is changed" in plain.message
    causal = labs.mask_lab(done, causal_off=True)
    assert "Causal mask off" in causal.message and "correct outputs): 1.000 →" in causal.message
    assert np.nanmax(np.abs(np.asarray(causal.figures[0].data[-1].z, float))) > 0.01
    assert "Decoder masked self-attention" in causal.figures[0].layout.title.text
    padding = labs.mask_lab(done, padding_off=True)
    assert "Padding mask off" in padding.message and "Grey rows" in padding.message
    assert np.nanmax(np.abs(np.asarray(padding.figures[0].data[-1].z, float))) > 0.01
    blocked = labs.mask_lab(done, blocked=["0: h", 3])
    assert "Blocked positions: 0, 3" in blocked.message and "**changed**" in blocked.message
    assert blocked.figures[1].data[0].name == "masks as trained"
    bad = labs.mask_lab(done, blocked=[40])
    assert bad.message.startswith("⚠")


def test_ablation_and_ranking(done):
    res = labs.ablation(done, ["cross L0 H2", "cross L0 H0"])
    assert "**changed**" in res.message
    assert [t.name for t in res.figures[0].data] == ["all heads on", "ablated"]
    assert labs.ablation(done, []).message.startswith("⚠")
    assert labs.ablation(done, ["nonsense"]).message.startswith("⚠")
    ranked = labs.rank_heads(done, n_inputs=3)
    assert len(ranked.rows) == 24 and ranked.rows[0][1] >= ranked.rows[-1][1]


def test_attribution_beside_cross_attention(done):
    view = labs.attribution(session.goto(done, 3).state, "L1", n_steps=8)
    assert "`ig~cross L1` " in view.message and len(view.figures) == 2
    assert "cross-attention L1" in view.figures[0].data[1].name
    rho = view.message.split("`ig~cross L1` ")[1][:4]
    assert f"Spearman ρ = {rho}" in view.figures[0].layout.title.text  # one measure, one value
    ig_colours = {t.marker.color for f in view.figures for t in f.data if "Integrated" in t.name}
    assert len(ig_colours) == 1  # one colour for a method in every chart
    gxi = next(t for t in view.figures[1].data if t.name == "gradient × input")
    assert np.abs(np.asarray(gxi.y)).sum() == pytest.approx(1.0)  # visible, not ~1e-7
    # one short y title on both charts: a long one is cut off by the chart's height
    assert [f.layout.yaxis.title.text for f in view.figures] == ["share of total"] * 2
    assert labs.attribution(session.reset(done).state).message.startswith("⚠")


# -- model-level panels -------------------------------------------------------------------------
def test_health_playback_and_exports(done):
    rep = health_panel.health(done, n=24)
    assert "Health check passed" in rep.message and 'class="finding' in rep.message
    steps = playback_panel.playback_steps(done)
    assert steps and steps == sorted(steps)
    play = playback_panel.playback(done, 2, None, "H1")
    assert f"step {steps[2]}" in play.message and "loss" in play.figures[0].layout.title.text
    paths = {w: export_panel.export(session.goto(done, 4).state, w).path for w in ("json", "npz")}
    data = json.loads(Path(paths["json"]).read_text())
    assert data["output"] == "dlro" and len(data["out_tokens"]) == 4
    assert "cross.0.weights" in np.load(paths["npz"])
    html = export_panel.export(done, "html").path
    assert "window.AttnViz.drawReport(" in Path(html).read_text()  # the canvas report


# -- models and uploads --------------------------------------------------------------------------
def test_models_are_shared_and_listed(models_dir):
    assert store.get_checkpoint(str(models_dir / "reverse")) is store.get_checkpoint(
        str(models_dir / "reverse")
    )
    assert "reverse" in store.shipped_models()
    assert store.resolve_device("auto") in ("cpu", "cuda")
    assert "helloworld" in store.examples_for("reverse")


def _zip(tmp_path, files: dict[str, bytes]) -> str:
    path = tmp_path / "upload.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return str(path)


def test_bad_uploads_are_refused_with_a_message(models_dir, fresh, tmp_path):
    pickle = tmp_path / "model.pt"
    torch.save({"w": torch.zeros(2)}, pickle)
    garbage = tmp_path / "model.safetensors"
    garbage.write_bytes(b"\x13\x37 not a checkpoint at all" * 10)
    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buf)
    cases = {
        "pickle": [str(pickle)],
        "zip with .pt": _zip(tmp_path, {"ckpt/model.pt": buf.getvalue()}),
        "garbage": [str(garbage)],
        "empty": [],
    }
    for name, paths in cases.items():
        paths = [paths] if isinstance(paths, str) else paths
        view = session.upload_model(fresh, paths)
        assert view.message.startswith("⚠"), name
        assert view.state.model == str(models_dir / "reverse"), name  # the loaded model stays
    assert "pickle" in session.upload_model(fresh, [str(pickle)]).message
    renamed = tmp_path / "weights.bin"  # a pickle under another name is caught by its bytes
    renamed.write_bytes(pickle.read_bytes())
    assert "pickle" in session.upload_model(fresh, [str(renamed)]).message


def test_good_upload_zip_loads_and_decodes(models_dir, fresh, tmp_path):
    files = {f"reverse/{n}": (models_dir / "reverse" / n).read_bytes()
             for n in ("model.safetensors", "config.json")}  # fmt: skip
    view = session.upload_model(dataclasses.replace(fresh, text="abc"), [_zip(tmp_path, files)])
    assert view.state.model != str(models_dir / "reverse") and not view.message.startswith("⚠")
    assert session.run(view.state).output == "cba"


def test_bench_step_measures_a_step(models_dir):
    from attnviz.bench import app as app_bench

    assert 0 < app_bench.bench_step(str(models_dir / "reverse"), "helloworld", repeats=2) < 10


def test_encrypted_zip_upload_is_refused_and_cleaned_up(fresh, tmp_path):
    import zipfile

    from attnviz.app import store as app_store

    bad = tmp_path / "enc.zip"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("model.safetensors", b"x" * 64)
    data = bytearray(bad.read_bytes())
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # set the "encrypted" flag in both headers
        at = data.find(sig)
        flag_at = at + (6 if sig == b"PK\x03\x04" else 8)
        data[flag_at] |= 1
    bad.write_bytes(bytes(data))
    view = session.upload_model(fresh, [str(bad)])
    assert view.message and "could not unpack" in view.message
    uploads = app_store.private_dir("uploads")
    assert not list(uploads.glob("incoming-*"))
    assert uploads.stat().st_mode & 0o077 == 0  # private to this user


def test_caches_are_bounded():
    from attnviz.app.store import LRU

    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def _reverse_files() -> dict[str, bytes]:
    folder = store.MODELS_DIR / "reverse"
    return {n: (folder / n).read_bytes() for n in ("model.safetensors", "config.json")}


def test_zip_path_traversal_is_flattened_never_followed(fresh, tmp_path):
    files = {f"../../escape/{n}": data for n, data in _reverse_files().items()}
    upload = tmp_path / "deep" / "er"
    upload.mkdir(parents=True)
    view = session.upload_model(dataclasses.replace(fresh, text="abc"), [_zip(upload, files)])
    assert not view.message or "could not" not in view.message
    assert view.state.model != fresh.model  # loaded from the upload, under fixed names
    assert not (tmp_path / "escape").exists() and not (upload.parent.parent / "escape").exists()
    assert not list(Path("/tmp").glob("escape*"))


def test_zip_bomb_is_refused_before_unpacking(fresh, tmp_path, monkeypatch):
    monkeypatch.setattr(unpack, "MAX_UPLOAD_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("model.safetensors", b"\0" * (4 << 20))  # 4 MB of zeros, a few KB packed
    assert bomb.stat().st_size < 64 << 10
    view = session.upload_model(fresh, [str(bomb)])
    assert view.message and "unpacks to more than 1 MB" in view.message


def test_word_level_translate_model_steps_to_its_prediction():
    import attnviz

    path = str(store.MODELS_DIR / "translate")
    text = "the big dog sees a small cat quickly with my friend"
    view = session.run(session.start(session.new_state(path), text).state)
    assert not view.message or "error" not in view.message.lower()
    expected = attnviz.load_checkpoint(path).predict(text)
    assert view.state.tokens and view.state.tokens[-1] == EOS
    words = " ".join(
        store.get_checkpoint(path).tgt_tokenizer.token(t) for t in view.state.tokens[:-1]
    )
    assert words == expected
    odd = session.start(session.new_state(path), "the zebra sees a cat")
    assert "zebra" in (odd.message or "")  # unknown words are flagged


def test_a_rewritten_checkpoint_restarts_decoding(tmp_path):
    import os
    import shutil

    folder = tmp_path / "ck"
    shutil.copytree(store.MODELS_DIR / "reverse", folder)
    done = session.run(session.start(session.new_state(str(folder)), "abc").state).state
    assert len(done.tokens) == 4
    weights = folder / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # "rewritten"
    view = session.back(done)  # any action notices first
    assert "changed on disk" in view.message
    assert view.state.tokens == [] and view.state.step == 0
    assert view.state.version == store.version_of(str(folder))
    again = session.step(view.state)
    assert not again.message and again.state.tokens == done.tokens[:1]


# -- what the page is sent ----------------------------------------------------------------------
def _rows(payload, kind, layer=0):
    data = base64.b64decode(payload["rows"][kind][layer]["w"])
    return np.frombuffer(data, "<f4")


def test_payload_sends_only_what_the_page_lacks(fresh):
    first = session.step(fresh, "helloworld")
    p = first.payload
    assert p["full"] and p["from"] == 0 and p["n"] == 1 and len(p["encoder"]) == 2
    assert first.state.page_rows == 1
    sizes = []
    s = first.state
    for _ in range(5):
        view = session.step(s)
        s = view.state
        assert not view.payload["full"] and view.payload["from"] == s.step - 1
        assert "encoder" not in view.payload
        # one new query row per layer and head: H * (step) decoder keys, H * Ts cross keys
        assert _rows(view.payload, "decoder_self").size == 4 * s.step
        assert _rows(view.payload, "cross").size == 4 * 10
        sizes.append(views.json_size(view.payload))
    assert max(sizes) < 3000 and max(sizes) - min(sizes) < 600  # grows by a row, not a matrix
    back = session.back(s)
    assert "rows" not in back.payload or not back.payload["rows"]
    assert views.json_size(back.payload) < 800  # Back and scrub send no weights at all
    reset = session.reset(s)
    assert reset.payload["n"] == 0 and reset.state.page_rows == 0


def test_payload_rows_are_the_recorded_weights_and_masks(models_dir, done):
    view = session.goto(dataclasses.replace(done, page_rows=-1), 6)
    p = view.payload
    figs = session.figures(view.state)
    ckpt = store.get_checkpoint(str(models_dir / "reverse"))
    stepper_trace = attnviz_trace(ckpt, view.state)
    n = len(done.tokens)
    w = _rows(p, "cross", 1).reshape(n, 4, 10)  # [rows, H, Ts]
    np.testing.assert_array_equal(w.transpose(1, 0, 2), stepper_trace.numpy("cross", 1)[0])
    dec = _rows(p, "decoder_self", 0)
    row5 = dec[4 * sum(range(1, 6)) : 4 * sum(range(1, 7))].reshape(4, 6)  # row 5: keys 0..5
    np.testing.assert_array_equal(row5, stepper_trace.numpy("decoder_self", 0)[0, :, 5, :6])
    bits = p["rows"]["decoder_self"][0]["m"]
    assert len(bits) == sum(range(1, n + 1)) and set(bits) == {"0"}  # the past is never blocked
    assert stepper_trace.numpy("decoder_self", 0, "mask")[0, 0].sum() == n * (n - 1) // 2
    enc = np.frombuffer(base64.b64decode(p["encoder"][1]["w"]), "<f4").reshape(4, 10, 10)
    np.testing.assert_array_equal(enc, stepper_trace.numpy("encoder_self", 1)[0])
    assert figs["cross"].data[0].z is not None and ckpt.task == "reverse"


def test_stepper_rows_are_the_rows_the_trace_assembles(models_dir):
    ckpt = store.get_checkpoint(str(models_dir / "reverse"))
    stepper = ckpt.stepper("helloworld")
    stepper.run()
    trace, n = stepper.trace(), stepper.position
    rows = stepper.rows(3, 7)
    assert sorted(rows) == sorted(trace.keys()[2:])  # every layer of both decoder kinds
    for (kind, layer), pairs in rows.items():
        assert len(pairs) == 4
        for r, (w, m) in enumerate(pairs, start=3):
            tk = r + 1 if kind == "decoder_self" else 10
            assert w.shape == (4, tk) and m.shape == (tk,) and m.dtype == torch.bool
            torch.testing.assert_close(w, trace.weights(kind, layer)[0, :, r, :tk], rtol=0, atol=0)
            assert torch.equal(m, trace.mask(kind, layer)[0, 0, r, :tk])
    assert stepper.rows().keys() == rows.keys() and len(stepper.rows()["cross", 0]) == n
    assert stepper.rows(n, n) == {}
    with pytest.raises(attnviz.InputError, match="start <= stop"):
        stepper.rows(5, 3)


def test_a_step_sends_its_rows_without_assembling_the_trace(models_dir, fresh, monkeypatch):
    first = session.step(fresh, "helloworld")
    want = session.step(first.state).payload

    def assembled(*args, **kwargs):
        raise AssertionError("a Step assembled the whole trace")

    monkeypatch.setattr(attnviz.GreedyStepper, "trace", assembled)
    got = session.step(first.state).payload
    assert got["rows"] == want["rows"] and got["from"] == 1 and got["n"] == 2
    full = session.render(dataclasses.replace(first.state, page_rows=-1)).payload
    assert full["full"] and len(full["encoder"]) == 2 and full["rows"]["cross"]


def test_the_decoder_is_built_from_the_state_source_ids(models_dir, fresh, monkeypatch):
    started = session.start(fresh, "helloworld").state
    DECODERS.forget(started.sid)
    calls = []
    real = attnviz.Checkpoint.encode_source
    monkeypatch.setattr(
        attnviz.Checkpoint, "encode_source", lambda self, t: calls.append(t) or real(self, t)
    )
    view = session.step(started)  # a new decoder for this session: the ids are in the state
    assert calls == [] and view.output == "d"
    odd = dataclasses.replace(started, text="not what the ids say")  # the ids are decoded
    DECODERS.forget(odd.sid)
    assert session.run(odd).output == "dlrowolleh" and calls == []


def attnviz_trace(ckpt, state):
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        return stepper.trace()


def test_refused_new_input_clears_the_view(done):
    view = session.step(done, "a" * 300)
    assert "at most" in view.message and "Ready" not in view.message
    assert not view.state.started and view.output == "" and not view.payload["started"]


def test_messages_escape_and_show_whitespace(fresh):
    view = session.start(fresh, "ab <&> c\n")
    assert "<code>␣</code>" in view.message and "<code>&lt;</code>" in view.message
    assert "<code>⏎</code>" in view.message and "&amp;lt;" not in view.message


def test_stopping_at_the_length_limit_is_said(done):
    limited = dataclasses.replace(done, max_steps=3, tokens=done.tokens[:3], step=3)
    view = session.goto(limited, 3)
    assert "length limit" in view.message and "Done" not in view.message


def test_beam_runs_on_the_given_text(done):
    out = session.beam(done, text="abc")
    assert "“abc”" in out and "<b>cba</b>" in out


def test_expected_output_for_built_in_tasks(fresh):
    view = session.step(fresh, "abc")
    assert view.payload["expected"] == ["c", "b", "a", "<eos>"]


def test_decoder_cache_is_bounded_and_forgets(models_dir):
    cache = DecoderCache(maxsize=2)
    ckpt = store.get_checkpoint(str(models_dir / "reverse"))
    states = [
        session.start(session.new_state(str(models_dir / "reverse")), t).state
        for t in ("ab", "cd", "ef")
    ]
    for s in states:
        with cache.hold(s, ckpt, s.version) as stepper:
            stepper.step()
    assert len(cache) == 2 and states[0].sid not in cache.sessions()
    cache.forget(states[2].sid)
    assert cache.sessions() == {states[1].sid}


def test_uploads_are_named_by_their_file(models_dir, fresh, tmp_path):
    files = {f"reverse/{n}": (models_dir / "reverse" / n).read_bytes()
             for n in ("model.safetensors", "config.json")}  # fmt: skip
    path = tmp_path / "my-model.zip"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    view = session.upload_model(fresh, [str(path)])
    assert store.model_name(view.state.model).startswith("my-model")
    assert store.model_name(view.state.model) in store.menu(view.state.model)  # its own
    assert store.resolve_model(store.model_name(view.state.model)) == view.state.model


def test_panel_stamps_say_which_panels_an_action_makes_stale(done):
    before = app_stamps.panel_stamps(done)
    back = app_stamps.panel_stamps(session.back(done).state)
    why = {"why_dla", "why_lens", "why_patch", "why_flow", "why_alt"}  # follow the step
    assert {k for k in before if before[k] != back[k]} == {"mask", "attr", "export", "faith",
                                                           "whatif", "attr_alt", "attr_vs",
                                                           "reference", *why}  # fmt: skip
    new = app_stamps.panel_stamps(session.start(done, "abc").state)
    assert {k for k in before if before[k] != new[k]} == {"mask", "attr", "export", "faith",
                                                          "whatif", "beam", "ablate", "align",
                                                          "compare", "attr_alt", "attr_vs",
                                                          "reference", "health", *why}  # fmt: skip
    assert before["model"] == new["model"]


def test_follow_rules_say_what_each_panel_does_after_an_event(done):
    at = app_stamps.panel_stamps(done)
    shown = {k: at[k] for k in ("mask", "attr", "beam", "align", "model")}  # computed at done
    back = session.back(done).state
    assert app_stamps.stale_panels(shown, back) == {"mask", "attr"}
    plan = app_stamps.follow(shown, back, "step")  # the step view is shown: clear, rerun nothing
    assert plan and plan.clear == {"mask", "attr"} and not plan.rerun and not plan.renew
    assert plan.stamps == {k: shown[k] for k in ("beam", "align", "model")}
    plan = app_stamps.follow(shown, back, "mask")  # the mask lab is shown: it follows the step
    assert plan.rerun == {"mask"} and plan.clear == {"attr"}
    assert (
        plan.stamps["mask"] == app_stamps.panel_stamps(back)["mask"] and "attr" not in plan.stamps
    )
    new = session.start(done, "abc").state  # a new input: every input-bound panel is stale
    assert app_stamps.follow(shown, new, "align").clear == {"mask", "attr", "beam", "align"}
    moved = {**shown, "model": (done.model, -1)}  # the checkpoint changed on disk
    plan = app_stamps.follow(moved, done, "step")
    assert plan.renew == {"model"} and not plan.clear and plan.stamps == shown
    assert (
        not app_stamps.follow(shown, done, "mask")
        and app_stamps.follow({}, new, "mask").stamps == {}
    )


def _lens_arrays(p: dict, kind: str) -> list[np.ndarray]:
    return [
        np.frombuffer(base64.b64decode(e["w"]), "<f4").reshape(e["h"], e["tq"], e["tk"])
        for e in p["lens"]["kinds"][kind]
    ]


def test_lens_payload_covers_the_decode_and_matches_the_recorded_weights(done):
    from attnviz.app import lenses

    n = len(done.tokens)
    with DECODERS.hold(done, session.checkpoint_of(done), done.version) as stepper:
        trace = stepper.trace(upto=n)
    rollout = lenses.payload(done, "rollout")["lens"]
    assert rollout["n"] == n and rollout["epoch"] == f"{done.sid}:{done.epoch}"
    for kind, shape in (("encoder_self", (10, 10)), ("decoder_self", (n, n)), ("cross", (n, 10))):
        for layer, m in enumerate(_lens_arrays({"lens": rollout}, kind)):
            assert m.shape == (1, *shape)
            np.testing.assert_allclose(m.sum(-1), 1, atol=1e-5)  # rollout rows sum to 1
            assert layer < 2
    norms = lenses.payload(done, "norms")
    for layer, m in enumerate(_lens_arrays(norms, "cross")):
        w = trace.numpy("cross", layer)[0]  # [H, n, Ts]: what the stepper recorded
        assert m.shape == w.shape and np.all((m > 0) == (w > 0))
    assert lenses.payload(done, "weights")["lens"]["kinds"] == {}  # the page has those
    bad = lenses.payload(done, "gradients")["lens"]
    assert bad["name"] == "weights" and "lens must be one of" in bad["error"]


# -- the Attribution tab's alternatives menu and the Reference box follow the step view ---------
def _page():
    """A Page built in a Blocks (not launched): its follow() is called directly."""
    import gradio as gr

    from attnviz.app import ui

    with gr.Blocks():
        return ui.Page(session.new_state(None, "cpu"))


def _follow(page, state, stamps, active, ref=""):
    """``page.follow`` as the follow button calls it: the values of ``page.follow_inputs()``."""
    given = {page.state: state, page.stamps: stamps, page.active: active, page.reference: ref,
             page.wi_open: False, page.wi_heads: [], page.part("labs").blocked: [], page.theme: "light"}  # fmt: skip
    return page.follow(*(given.get(c) for c in page.follow_inputs()))


def _stepped(models_dir, n):
    s = session.start(session.new_state(str(models_dir / "reverse")), "helloworld").state
    for _ in range(n):
        s = session.step(s).state
    return s


def test_the_alternatives_menu_follows_the_step_rules():
    s = session.SessionState(model="m", epoch=1, step=3)
    nxt = session.SessionState(model="m", epoch=1, step=4)
    stamps = {"attr_alt": app_stamps.panel_stamps(s)["attr_alt"]}
    assert app_stamps.stale_panels(stamps, nxt) == {"attr_alt"}
    shown = app_stamps.follow(stamps, nxt, "attr")  # on the Attribution tab: refilled now
    assert shown.rerun == {"attr_alt"} and shown.stamps == {
        "attr_alt": app_stamps.panel_stamps(nxt)["attr_alt"]
    }
    away = app_stamps.follow(stamps, nxt, "step")  # elsewhere: emptied, refilled on the tab
    assert away.clear == {"attr_alt"} and away.stamps == {}


def test_stepping_on_the_attribution_tab_renews_its_alternatives(models_dir):
    s = _stepped(models_dir, 2)
    page = _page()
    stamps = {"attr_alt": app_stamps.panel_stamps(s)["attr_alt"]}  # the menu filled at step 2
    nxt = session.step(s).state  # Step pressed while the Attribution tab is shown
    view = session.step(s)
    assert view.state == nxt and app_stamps.stale_panels(stamps, nxt) == {"attr_alt"}
    out = _follow(page, nxt, stamps, "attr")
    menu = out[page.part("labs").attr_alt]
    want, default = labs.alternatives(nxt)
    assert [tuple(c) for c in menu.choices] == [tuple(c) for c in want]
    assert want != labs.alternatives(s)[0] and menu.value == default
    assert nxt.tokens[2] not in [int(v) for _, v in menu.choices]  # the chosen one is no choice
    assert out[page.stamps] == {"attr_alt": app_stamps.panel_stamps(nxt)["attr_alt"]}
    away = _follow(page, nxt, stamps, "step")
    assert away[page.part("labs").attr_alt].choices == [] and away[page.stamps] == {}


def test_the_reference_follows_the_output_shown_rules(models_dir, done):
    stamps = {"reference": app_stamps.panel_stamps(done)["reference"]}
    back = session.back(done).state  # the output shown moved: rescored, the mark follows
    plan = app_stamps.follow(stamps, back, "mask")
    assert plan.rerun == {"reference"} and plan.stamps == {
        "reference": app_stamps.panel_stamps(back)["reference"]
    }
    new = session.start(done, "abc").state  # a new input: scored for another one, cleared
    assert app_stamps.follow(stamps, new, "step").clear == {"reference"}
    other = dataclasses.replace(done, model=str(models_dir / "copy"))  # another model: cleared
    assert app_stamps.follow(stamps, other, "step").clear == {"reference"}
    moved = {"reference": (*stamps["reference"][:2], -1, stamps["reference"][3])}  # file changed
    assert app_stamps.follow(moved, done, "step").clear == {"reference"}
    assert not app_stamps.follow(stamps, done, "step")  # nothing moved: nothing to do


def _leaves(strip: str) -> list[int]:
    import re

    chips = re.findall(r'<span class="ref-tok[^"]*"[^>]*?(data-leaves="1")?\s+title=', strip)
    return [i for i, c in enumerate(chips) if c]


def test_a_forced_step_moves_the_references_output_mark(models_dir):
    from attnviz.app.panels import reference

    ckpt = session.checkpoint_of(_stepped(models_dir, 0))
    s = _stepped(models_dir, 3)
    ref = "dlrowolleh"  # the task's answer: the greedy output follows it
    first = reference.score(s, ref)
    assert first.output_divergence is None and _leaves(first.html) == []
    stamps = {"reference": app_stamps.panel_stamps(s)["reference"]}
    alt = int(np.argsort(-_probs(ckpt, s.tokens[:3]))[1])  # step 4's runner-up
    forced = session.step(session.force(session.step(s).state, alt).state).state
    assert forced.forced == [3] and forced.step == 5
    assert app_stamps.stale_panels(stamps, forced) == {"reference"}
    page = _page()
    out = _follow(page, forced, stamps, "step", ref)
    # by hand: the reference's ids against the output shown, position by position
    ids = ckpt.score("helloworld", ref).ids
    shown = forced.tokens[: forced.step]
    want = next(i for i, (a, b) in enumerate(zip(ids, shown, strict=False)) if a != b)
    assert want == 3
    assert _leaves(out[page.ref_strip]) == [want]
    assert f"leaves the reference at step {want + 1}" in out[page.ref_msg]  # 1-based steps
    assert out[page.stamps] == {"reference": app_stamps.panel_stamps(forced)["reference"]}
    new = session.start(forced, "abc").state  # a new input: cleared, not rescored
    gone = _follow(page, new, out[page.stamps], "step", ref)
    plot = gone[page.ref_plot]  # hidden, empty: no blank box left behind
    assert gone[page.ref_strip] == "" and plot.value is None and plot.visible is False
    assert gone[page.stamps] == {}


def _probs(ckpt, prefix):
    st = ckpt.stepper("helloworld")
    st.sync(prefix)
    return st.step().probs.numpy()


def test_pieces_read_back_as_text_without_markers():
    """The training playback's probe line: subword pieces as words, not raw ``▁`` pieces."""
    assert views.pieces_text(["▁the", "▁ca", "t", "."], "bpe") == "the cat."
    assert views.pieces_text(list("abc"), "char") == "abc"
    assert views.pieces_text(["le", "chat"], "word") == "le chat"


def test_the_expected_line_and_the_reference_box_say_the_same(models_dir, tmp_path):
    """One function (:func:`attnviz.train.evaluate.expected_output`) gives the output expected
    of an input: the Expected line under the step view and the Reference box's pre-filled
    text say the same, for a built-in task's input and for a corpus run's dev source."""
    from attnviz.app.panels import reference
    from attnviz.train.evaluate import expected_output

    def both(folder: Path, text: str) -> tuple[list[str] | None, str]:
        view = session.start(session.new_state(str(folder)), text)
        return view.payload["expected"], reference.default_reference(view.state)

    line, box = both(models_dir / "reverse", "helloworld")  # the task's answer
    assert box == "dlrowolleh" and line == [*box, "<eos>"]
    # the same folder without its task, with the dev pairs a corpus run stores beside it
    rev = attnviz.load_checkpoint(models_dir / "reverse")
    meta = {k: v for k, v in rev.meta.items() if k != "task"}
    corpus = attnviz.save_checkpoint(
        tmp_path / "corpus", rev.model, rev.src_tokenizer, rev.tgt_tokenizer, meta
    )
    (corpus / "dev_pairs.json").write_text(json.dumps({"pairs": [["abc", "xyz"]]}))
    line, box = both(corpus, "abc")  # a dev source: its reference, not the reversal
    assert box == "xyz" and line == [*box, "<eos>"]
    assert expected_output(store.get_checkpoint(corpus), "abc") == "xyz"
    line, box = both(corpus, "abd")  # not a dev source: nothing expected, nothing pre-filled
    assert line is None and box == ""


def test_the_page_is_told_when_the_model_changes_without_a_server_path(models_dir):
    """The page resets its per-model choices ("show: words") when the payload's model changes;
    what names the model is no path."""
    a = session.start(session.new_state(str(models_dir / "reverse")), "abc").payload["model"]
    b = session.start(session.new_state(str(models_dir / "sort")), "abc").payload["model"]
    again = session.start(session.new_state(str(models_dir / "reverse")), "cab").payload["model"]
    assert a == again != b and "/" not in a and str(models_dir) not in a


@given(st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0, 1e-9]), min_size=1, max_size=40),
       st.integers(1, 45))  # fmt: skip
def test_top_ids_are_the_stable_full_sorts(values, k):
    """The next-token panel's top ids in O(V): the same ids, in the same order, as the full
    stable sort, ties included."""
    from attnviz.app.views import top_ids

    p = np.asarray(values, dtype=np.float32)
    assert top_ids(p, k).tolist() == np.argsort(-p, kind="stable")[:k].tolist()


def test_a_health_report_on_the_input_says_it_went_stale_when_the_file_changed(models_dir):
    """The checkpoint file changed under a report checked on the current input: the report
    is replaced by the "changed since" note the other labs show, not emptied silently."""
    from attnviz.app import state as app_stamps
    from attnviz.app.pagetext import STALE

    page, state = _page(), _stepped(models_dir, 1)
    now = app_stamps.panel_stamps(state)
    old = {"health": (state.model, "older", state.epoch), "model": (state.model, "older")}
    out = _follow(page, state, old, "step")
    assert out[page.part("health").health_html] == STALE and out[page.stamps] == {
        "model": now["model"]
    }
    out = _follow(page, state, {"model": old["model"]}, "step")  # no report on the input
    assert out[page.part("health").health_html] == ""
