"""The OpenAPI document tells the truth: schemathesis holds a real server, API key set, to its own /openapi.json.

Every operation in the document is run (a fixed number of examples each, generated deterministically: the same
cases on every run, so a failure reproduces; the report shows each failing case as a curl command) and every answer
is checked: no server error, each status documented, each body in a documented
media type and matching its schema, documented headers present, and other methods answered 405 with ``Allow``.
Requests are held to the document both ways: one it allows is not refused, one it forbids is refused
(``schemathesis.toml`` beside this file names the three operations whose validity a schema cannot state).

Nothing in the document is excluded. What the document does not hold, and so is not run here: the WebSocket
routes (OpenAPI cannot describe them; their fuzzing is issue 31's part 2) and SageMaker's ``POST /invocations``
(rewritten by ``InvocationsRouter`` to the routes that are run here).

Synthesis is real Piper synthesis, so the server's ``--max-input-chars`` is small: the document states it as the
text fields' ``maxLength``, and the longest text a valid request can carry is a few seconds of audio.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from speakwire.engines.piper import PiperEngine
from speakwire.settings import Settings
from support.live_server import LiveServer, start_server

API_KEY = "schemathesis-key"
MAX_EXAMPLES = 5
"""Examples per operation in the fuzzing phase. The examples phase runs each operation's documented example, and
the coverage phase its fixed set of boundary and invalid cases (most of the run: about 1,600 requests in all)."""
PHASES = "examples,coverage,fuzzing"
"""The stateful phase (chains of calls along the links schemathesis infers) is left out of CI to keep its time
fixed; a longer run with it, by hand, is in issue 31's note."""
MAX_INPUT_CHARS = 40
CONFIG = Path(__file__).with_name("schemathesis.toml")
"""The checks (every answer's, and the request-strictness ones) and their documented exceptions."""

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def keyed_server(piper_engine: PiperEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(api_key=API_KEY, max_input_chars=MAX_INPUT_CHARS,
                        data_dir=str(tmp_path_factory.mktemp("voices")))  # fmt: skip
    live = start_server(settings, engine=piper_engine)
    yield live
    live.stop()


def schemathesis_command(url: str, *, max_examples: int = MAX_EXAMPLES) -> list[str]:
    """``st run`` over every operation of the server's document, with a fixed budget and derandomized generation."""
    return [
        str(Path(sys.executable).parent / "schemathesis"),
        "--config-file",
        str(CONFIG),
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {API_KEY}",
        "--phases",
        PHASES,
        "--max-examples",
        str(max_examples),
        "--generation-deterministic",
        "--workers",
        "1",
        "--request-timeout",  # schemathesis' default is 10 s; a synthesis on a loaded CI machine may take longer
        "60",
        "--no-color",
    ]


def test_every_operation_answers_as_its_document_says(keyed_server: LiveServer) -> None:
    command = schemathesis_command(keyed_server.url)
    run = subprocess.run(command, capture_output=True, text=True, timeout=540, check=False)
    report = f"$ {' '.join(command)}\n{run.stdout}\n{run.stderr}"
    assert run.returncode == 0, report


def test_an_unknown_field_named_outside_latin_1_is_ignored_and_named_in_escapes(keyed_server: LiveServer) -> None:
    """Found by schemathesis: the name went verbatim into ``X-Ignored-Fields``, which cannot carry it (a 500)."""
    body = {"input": "Hello.", "response_format": "pcm", "揄": True, "tone": 1}
    auth = {"Authorization": f"Bearer {API_KEY}"}
    response = httpx.post(f"{keyed_server.url}/v1/audio/speech", headers=auth, json=body, timeout=60)
    assert response.status_code == 200 and response.content
    assert response.headers["x-ignored-fields"] == "\\u63c4, tone"
