"""The Gradio page in headless Chromium: speech streams into the page, errors read as sentences.

Drives the system Chromium (never a downloaded one) through Playwright against a real
speakwire server with the Piper voice. Also checks that neither the page nor the Python
side tries to reach anything outside this machine: the UI must work where there is no
internet. Writes ``docs/ui.png``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.live_server import LiveServer, free_port

pytestmark = [
    pytest.mark.browser,
    # gradio's queue summarises runs with pandas calls that pandas 3 deprecates; not ours to fix.
    pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword is deprecated):DeprecationWarning"),
]

pytest.importorskip("gradio", reason="the [ui] extra (gradio) is not installed")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

from speakwire.ui.app import build_ui, launch_ui  # noqa: E402
from speakwire.ui.backend import Catalogue, SpeechBackend  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no system Chromium (apt-get install chromium, or set CHROMIUM=/path)", allow_module_level=True)

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run", "--disable-quic", "--disable-sync",
]  # fmt: skip
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "ui.png"
TEXT = ("Hello from speakwire. This sentence is streamed to the browser while it is still being made. "
        "And a third one, to be sure.")  # fmt: skip
STATUS_JS = "document.querySelector('#status textarea')?.value ?? ''"

_outside_connections: list[str] = []
_watching = False


def _watch_connections(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: note every connection this process opens to a host other than this machine."""
    if not _watching or event != "socket.connect":
        return
    address = args[1]
    if isinstance(address, tuple) and not _is_loopback(str(address[0])):
        _outside_connections.append(str(address))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


@pytest.fixture(scope="module")
def no_outside_connections() -> Iterator[list[str]]:
    global _watching
    sys.addaudithook(_watch_connections)  # hooks cannot be removed; _watching turns this one off
    _watching = True
    yield _outside_connections
    _watching = False


def serve_ui(backend: SpeechBackend) -> Iterator[str]:
    blocks = build_ui(backend)
    url, _ = launch_ui(blocks, port=free_port())
    yield url
    blocks.close()


@pytest.fixture(scope="module")
def ui_url(server: LiveServer, no_outside_connections: list[str]) -> Iterator[str]:
    yield from serve_ui(SpeechBackend.for_server(server.url))


@pytest.fixture(scope="module")
def dead_ui_url(no_outside_connections: list[str]) -> Iterator[str]:
    yield from serve_ui(SpeechBackend.for_server(f"http://127.0.0.1:{free_port()}"))


class EndlessTransport:
    """A server that never finishes: 0.1 s of tone every 0.2 s until the client closes the stream."""

    TONE = b"".join(int(8000 * ((i // 27) % 2 * 2 - 1)).to_bytes(2, "little", signed=True) for i in range(2400))

    def __init__(self) -> None:
        self.closed = False
        self._started = False

    async def send_text(self, message: str) -> None:
        pass

    async def send_bytes(self, data: bytes) -> None:
        pass

    async def receive(self) -> str | bytes:
        if not self._started:
            self._started = True
            return json.dumps({"type": "audio.start", "sample_rate": 24000})
        await asyncio.sleep(0.2)
        return self.TONE

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture(scope="module")
def endless_streams() -> list[EndlessTransport]:
    return []


@pytest.fixture(scope="module")
def endless_ui_url(endless_streams: list[EndlessTransport]) -> Iterator[str]:
    async def connect() -> EndlessTransport:
        endless_streams.append(EndlessTransport())
        return endless_streams[-1]

    async def catalogue() -> Catalogue:
        return Catalogue(voices=("Vivian",), default_voice="Vivian", languages=("Auto",), supports_cloning=True)

    yield from serve_ui(SpeechBackend(target="an endless test stream", connect=connect, load_catalogue=catalogue))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 720},
        )  # fmt: skip
        yield context
        context.close()


@pytest.fixture
def outside_requests() -> list[str]:
    """URLs the page asked for that are not on this machine."""
    return []


@pytest.fixture
def page(browser: Any, outside_requests: list[str]) -> Iterator[Any]:
    page = browser.new_page()
    page.on("request", lambda r: None if _is_local(r.url) else outside_requests.append(r.url))
    yield page
    page.close()


def _is_local(url: str) -> bool:
    return url.startswith(("http://127.0.0.1", "data:", "blob:"))


def wait_for_status(page: Any, pattern: str, timeout_s: float = 60) -> str:
    """Wait until the status box matches ``pattern`` (a JavaScript regex); return its text."""
    page.wait_for_function(f"new RegExp({json.dumps(pattern)}).test({STATUS_JS})", timeout=timeout_s * 1000)
    return str(page.evaluate(STATUS_JS))


def test_speak_streams_audio_into_the_page_and_counts_the_chunks(
    page: Any, ui_url: str, outside_requests: list[str], no_outside_connections: list[str]
) -> None:
    page.goto(ui_url)
    assert wait_for_status(page, "^Ready") == "Ready: piper, 1 voice."
    assert page.locator("#voice input").input_value() == "en_US-joe-medium"
    sync_api.expect(page.get_by_text("Transcript of the reference clip")).to_be_hidden()  # Piper does not clone
    page.locator("#text textarea").fill(TEXT)
    page.locator("#speak").click()
    status = wait_for_status(page, "^(Done|Error)")

    done = re.fullmatch(r"Done: (\d+) chunks, [\d,]+ bytes \(([\d.]+) s of audio\); first audio after \d+ ms\.", status)
    assert done is not None, status
    assert int(done[1]) > 1
    # The player holds the streamed playlist (a MediaSource blob) and is playing it; its duration
    # grows as segments load, up to the length of the speech the status reported plus the AAC
    # encoder's priming and last frame (under 0.1 s). A gap at every chunk join (~36 ms each with a
    # fresh encoder per chunk) would add well over 0.2 s across these chunks.
    player = "document.querySelector('#speech audio')"
    page.wait_for_function(f"(a => a && a.src.startsWith('blob:') && a.played.length > 0)({player})")
    page.wait_for_function(f"{player}.duration >= {float(done[2])}", timeout=30_000)
    assert float(done[2]) <= page.evaluate(f"{player}.duration") < float(done[2]) + 0.2
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT))
    assert outside_requests == []
    assert no_outside_connections == []


def test_an_unreachable_server_reads_as_a_sentence_in_the_status_and_a_warning(page: Any, dead_ui_url: str) -> None:
    page.goto(dead_ui_url)
    expected = (r"Cannot reach the speakwire server at http://127\.0\.0\.1:\d+: connection refused\. "
                r"Is it running\? \(speakwire serve\)")  # fmt: skip
    assert re.fullmatch(f"Error: {expected}", wait_for_status(page, "^Error"))
    page.locator("#text textarea").fill("Hello?")
    page.locator("#speak").click()
    sync_api.expect(page.get_by_test_id("toast-text")).to_have_text(re.compile(expected))
    assert re.fullmatch(f"Error: {expected}", wait_for_status(page, "^Error"))
    assert "Traceback" not in page.content()


def test_stop_closes_the_stream_and_says_so(
    page: Any, endless_ui_url: str, endless_streams: list[EndlessTransport]
) -> None:
    page.goto(endless_ui_url)
    wait_for_status(page, "^Ready")
    page.locator("#text textarea").fill("Go on forever.")
    page.locator("#speak").click()
    wait_for_status(page, "^Streaming: [3-9] chunks")
    page.locator("#stop").click()
    assert wait_for_status(page, "^Stopped") == "Stopped."
    page.wait_for_timeout(500)
    assert [stream.closed for stream in endless_streams] == [True]
    # Gradio paints a cancelled run's outputs "Error" when the cancelling event has outputs of its own.
    assert "Error" not in page.locator("#status").inner_text()


def test_an_engine_that_clones_shows_the_reference_clip_and_transcript_inputs(page: Any, endless_ui_url: str) -> None:
    page.goto(endless_ui_url)
    wait_for_status(page, "^Ready")
    sync_api.expect(page.get_by_text("Reference voice: upload a clip or record one")).to_be_visible()
    sync_api.expect(page.get_by_text("Transcript of the reference clip")).to_be_visible()
