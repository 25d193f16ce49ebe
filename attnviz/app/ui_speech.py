"""A speech model's input on the page: the clip (upload or microphone) and the example clips,
shown instead of the text box, and their events. The clip the audio component holds is the
speech model's only input (Step, Run and the API take it as ``clip``); the text box never
reaches it.
"""

from __future__ import annotations

import gradio as gr

from . import session, speech
from .state import SessionState
from .ui_common import MODEL_EVENTS


def speech_input(p) -> None:
    """The clip and the example clips (hidden until a speech model is loaded)."""
    with gr.Row(visible=False, elem_id="speech-input") as p.speech_row:
        p.audio_in = gr.Audio(
            sources=["upload", "microphone"], type="filepath", label="Input clip (≤ 30 s)",
            elem_id="input-audio", scale=3,
        )  # fmt: skip
        with gr.Column(scale=1):
            p.speech_examples = gr.Dropdown(
                label="Example clips (espeak-ng)", choices=speech_example_choices(), value=None,
                elem_id="speech-examples",
            )  # fmt: skip
            p.clip_note = gr.Markdown(speech.clip_note(None), elem_id="clip-note")


def speech_example_choices() -> list[str]:
    return [speech.example_name(p) for p in speech.examples()]


def speech_example_path(name: str | None) -> str | None:
    """An example clip's menu name -> a copy in this process's temporary folder (gradio
    serves files from there, and the session reads clips only from there or the examples)."""
    for path in speech.examples():
        if speech.example_name(path) == name:
            return speech.example_copy(path)
    return None


def clip_changed(answer, n: int, state: SessionState, stamps: dict, clip: str | None) -> tuple:
    """The audio component's clip changed: it is the input now (nothing decoded yet; none:
    the previous clip is dropped); the examples menu shows its name only when it is one.
    The clip the session already decodes changes nothing (the page can send one change
    twice, the second after a Step: it would undo it); ``n``: the decoding outputs' count."""
    if clip and state.started and state.text == clip:
        return (gr.skip(),) * (n + 2)
    view = session.start(state, None, clip=clip or "")
    return (*answer(view, stamps), speech.example_of(clip), speech.clip_note(clip))


def wire(p, answer) -> None:
    """An example chosen is put in the audio component, and the clip it holds (chosen,
    uploaded, recorded or cleared) becomes the input at once (named ``speech_example`` and
    ``clip``); ``answer``: how a session view becomes the decoding outputs."""
    outs = p.decode_outputs()
    p.speech_examples.input(
        lambda e: speech_example_path(e) or gr.skip(), [p.speech_examples], [p.audio_in],
        api_name="speech_example",
    )  # fmt: skip
    p.audio_in.change(
        lambda s, stamps, clip=None: clip_changed(answer, len(outs), s, stamps, clip),
        [p.state, p.stamps, p.audio_in], [*outs, p.speech_examples, p.clip_note],
        api_name="clip", **MODEL_EVENTS,
    )  # fmt: skip
