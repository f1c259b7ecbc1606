"""The Gradio page: text in, speech streaming out, with a status line that counts what arrived.

Layout and wiring only; what the page asks of the speech service is ``backend.py``.
Gradio is the ``[ui]`` extra and is imported on first use, with everything in it that
would reach the internet switched off (usage analytics, the version check, the run
history's Hugging Face sync, the Share button): the UI often runs next to a server on a
machine with no way out, and it should neither stall nor leak there.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import logging
import os
from collections.abc import AsyncIterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from speakwire.errors import MissingExtraError
from speakwire.ui.backend import SpeakRequest, SpeechBackend, UiError, reference_data_uri
from speakwire.ui.stream import AdtsStream

if TYPE_CHECKING:
    from gradio import Blocks

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6006
"""The port the AWS sample's Gradio client uses."""
SPEED_RANGE = (0.5, 2.0)

# Gradio reads this at import and again before each analytics call, so Blocks(analytics_enabled=False)
# alone is not enough; set only where the user has not chosen.
_OFFLINE_ENVIRONMENT = {"GRADIO_ANALYTICS_ENABLED": "False"}


def import_gradio() -> ModuleType:
    """Gradio, with its phoning home switched off; ``MissingExtraError`` says how to install it."""
    for name, value in _OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    try:
        return importlib.import_module("gradio")
    except ModuleNotFoundError as exc:
        if exc.name != "gradio":
            raise  # gradio is there but broken: its own error says more than an install hint
        raise MissingExtraError("ui", "gradio") from exc


class SpeechPage:
    """The page's event handlers, bound to one backend (kept apart from the layout so each reads alone)."""

    def __init__(self, backend: SpeechBackend, gradio: ModuleType) -> None:
        self.backend = backend
        self._gr = gradio

    async def load(self) -> tuple[Any, Any, Any, str]:
        """Fill the voice and language lists from the service; show the cloning inputs if it clones."""
        gr = self._gr
        try:
            catalogue = await self.backend.catalogue()
        except UiError as exc:
            # The page still works: the lists accept typed values, and Speak reports its own errors.
            return gr.skip(), gr.skip(), gr.skip(), f"Error: {exc}"
        voice = gr.Dropdown(choices=list(catalogue.voices), value=catalogue.default_voice)
        languages = list(catalogue.languages)
        language = gr.Dropdown(choices=languages, value=_default_language(languages))
        cloning = gr.Group(visible=catalogue.supports_cloning)
        return voice, language, cloning, catalogue.describe()

    async def speak(
        self, text: str, voice: str | None, language: str | None, speed: float | None, ref_audio: str | None,
        ref_text: str | None,
    ) -> AsyncIterator[tuple[Any, str]]:  # fmt: skip
        """Stream speech into the audio player, updating the status line with every chunk.

        The audio goes out as ADTS AAC segments from one encoder for the whole text (``AdtsStream``),
        made off the event loop. The encoder belongs to this generator and goes with it, however the
        run ends; what it still holds comes out with the last status, or with an error's.
        """
        gr = self._gr
        yield gr.skip(), f"Connecting to {self.backend.target}…"
        stream: AdtsStream | None = None
        try:
            reference = await asyncio.to_thread(reference_data_uri, ref_audio) if ref_audio else None
            request = SpeakRequest(text=text, voice=voice or None, language=language or None, speed=speed,
                                   ref_audio=reference, ref_text=ref_text or None)  # fmt: skip
            async for pcm, progress in self.backend.speak(request):
                if pcm and stream is None:
                    stream = AdtsStream(progress.sample_rate)
                segment = await asyncio.to_thread(stream.encode, pcm) if pcm and stream else b""
                if progress.finished:
                    segment += await _finish(stream)
                yield segment or gr.skip(), progress.describe()
        except UiError as exc:
            gr.Warning(str(exc))
            yield await _finish(stream) or gr.skip(), f"Error: {exc}"
        except Exception as exc:  # the page must show a sentence, never a stack trace; the log keeps the trace
            logger.exception("speaking failed")
            yield gr.skip(), f"Error: unexpected {type(exc).__name__}: {exc}. The UI's log has the details."

    def stopped(self) -> str:
        """The status once Stop has cancelled a run."""
        return "Stopped."


async def _finish(stream: AdtsStream | None) -> bytes:
    """The frames ``stream`` still holds, if it was started."""
    return await asyncio.to_thread(stream.finish) if stream is not None else b""


def _default_language(languages: list[str]) -> str | None:
    """``Auto`` where the engine detects the language, else its first (Piper voices speak one)."""
    if "Auto" in languages:
        return "Auto"
    return languages[0] if languages else None


def build_ui(backend: SpeechBackend, *, title: str = "speakwire") -> Blocks:
    """The page for ``backend``; launch it with ``launch_ui``.

    The streamed speech is encoded here (``speakwire.ui.stream``), so no ``ffmpeg`` program is needed.

    Args:
        backend: Where the speech comes from.
        title: Browser tab title.

    Raises:
        MissingExtraError: Gradio is not installed.
    """
    gr = import_gradio()
    from speakwire.ui.player import speech_player  # gradio glue: only once gradio is imported and set up

    page = SpeechPage(backend, gr)
    blocks: Blocks
    with gr.Blocks(title=title, analytics_enabled=False) as blocks:
        gr.Markdown(f"## {title} — streaming speech\nSpeaking through {backend.target}.")
        with gr.Row():
            with gr.Column(scale=3):
                text = gr.Textbox(label="Text", lines=5, placeholder="Type what to say…", elem_id="text")
                with gr.Row():
                    # allow_custom_value: the lists stay usable when the service could not be asked.
                    voice = gr.Dropdown(label="Voice", choices=[], allow_custom_value=True, elem_id="voice")
                    language = gr.Dropdown(label="Language", choices=[], allow_custom_value=True, elem_id="language")
                    speed = gr.Slider(*SPEED_RANGE, value=1.0, step=0.05, label="Speed", elem_id="speed")
                with gr.Group(visible=False, elem_id="cloning") as cloning:
                    ref_audio = gr.Audio(label="Reference voice: upload a clip or record one",
                                         sources=["upload", "microphone"], type="filepath")  # fmt: skip
                    ref_text = gr.Textbox(label="Transcript of the reference clip", lines=2)
                with gr.Row():
                    speak = gr.Button("Speak", variant="primary", elem_id="speak")
                    stop = gr.Button("Stop", elem_id="stop")
            with gr.Column(scale=2):
                # Download only: gradio's Share button would upload the speech to Hugging Face.
                audio = speech_player(label="Speech", autoplay=True, interactive=False, buttons=["download"],
                                      elem_id="speech")  # fmt: skip
                status = gr.Textbox(label="Status", interactive=False, lines=3, elem_id="status")
        blocks.load(page.load, outputs=[voice, language, cloning, status])
        # No concurrency limit here: every listener gets a stream of its own, and the
        # server's admission control (reported as "busy") is the one place that says no.
        speaking = speak.click(page.speak, inputs=[text, voice, language, speed, ref_audio, ref_text],
                               outputs=[audio, status], concurrency_limit=None)  # fmt: skip
        # Cancelling the run closes the stream (the backend's ``finally``), which stops synthesis on the
        # server. "Stopped." comes in a second step: given outputs of its own, the cancelling event makes
        # gradio paint the cancelled run's outputs "Error". The cancelling event runs a Python no-op rather
        # than no function: gradio 6.17 never starts the ``.then`` of an event whose function is None.
        stop.click(lambda: None, cancels=[speaking]).then(page.stopped, outputs=[status])
    return blocks


def launch_ui(blocks: Blocks, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
              share: bool = False) -> tuple[str, str | None]:  # fmt: skip
    """Start serving the page in the background; ``blocks.block_thread()`` waits until Ctrl-C.

    ``share`` also opens a public gradio.live tunnel: off unless asked, since anyone with
    the link can then speak through the server.

    Returns:
        The page's local URL, and its public one when ``share`` worked.
    """
    blocks.queue(default_concurrency_limit=None)
    options: dict[str, Any] = {"quiet": True, "show_error": False}
    if "run_history" in inspect.signature(blocks.launch).parameters:
        options["run_history"] = False  # newer gradio keeps a history of runs (the texts spoken) unless told not to
    _, local_url, share_url = blocks.launch(server_name=host, server_port=port, share=share, prevent_thread_lock=True,
                                            **options)  # fmt: skip
    return str(local_url), str(share_url) if share_url else None
