"""The OpenAPI document names every route's answers: no HTTP route is left to FastAPI's guess of a JSON 200."""

from __future__ import annotations

from fastapi.routing import APIRoute

from speakwire.server.app import create_app
from speakwire.server.openapi.routes import ROUTES
from speakwire.settings import Settings


def test_every_http_route_has_an_entry_in_the_route_table() -> None:
    app = create_app(Settings())
    served = {(method, route.path) for route in app.routes if isinstance(route, APIRoute) for method in route.methods}
    assert served - set(ROUTES) == set()


def test_text_fields_are_limited_to_the_servers_max_input_chars() -> None:
    document = create_app(Settings(max_input_chars=123)).openapi()
    speech = document["paths"]["/v1/audio/speech"]["post"]["requestBody"]["content"]
    elevenlabs = document["paths"]["/v1/text-to-speech/{voice_id}"]["post"]["requestBody"]["content"]
    assert speech["application/json"]["schema"]["properties"]["input"]["maxLength"] == 123
    assert speech["multipart/form-data"]["schema"]["properties"]["input"]["maxLength"] == 123
    assert elevenlabs["application/json"]["schema"]["properties"]["text"]["maxLength"] == 123
    assert "x-speakwire-max-input-chars" not in str(document)


def test_metrics_are_documented_as_prometheus_text_and_audio_by_its_media_types() -> None:
    paths = create_app(Settings()).openapi()["paths"]
    assert list(paths["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]
    speech = paths["/v1/audio/speech"]["post"]["responses"]["200"]["content"]
    assert {"audio/mpeg", "audio/wav", "audio/pcm", "text/event-stream"} <= set(speech)
    assert "application/json" not in speech


def test_each_dialect_documents_its_own_error_shape() -> None:
    paths = create_app(Settings(api_key="k3y")).openapi()["paths"]

    def body(path: str, status: str) -> str:
        ref: str = paths[path]["post"]["responses"][status]["content"]["application/json"]["schema"]["$ref"]
        return ref.rsplit("/", 1)[-1]

    assert body("/v1/audio/speech", "404") == "OpenAIError"
    assert body("/v1/text-to-speech/{voice_id}", "404") == "ElevenLabsError"
    assert body("/v1/text-to-speech/{voice_id}", "422") == "ElevenLabsValidationError"
    assert body("/tts/bytes", "429") == "CartesiaError"
    assert body("/v1/speak", "401") == "DeepgramError"
    assert body("/v1/magpie/invocations", "400") == "MagpieError"
    assert body("/v1/audio/voices", "409") == "VoiceLibraryError"


def test_with_a_key_every_route_but_the_probes_names_it_and_its_401() -> None:
    paths = create_app(Settings(api_key="k3y")).openapi()["paths"]
    for path in ("/health", "/ready", "/ping"):
        assert "security" not in paths[path]["get"] and "401" not in paths[path]["get"]["responses"]
    guarded = [op for path, ops in paths.items() if path not in ("/health", "/ready", "/ping") for op in ops.values()]
    assert guarded and all(op["security"] and "401" in op["responses"] for op in guarded)


def test_without_a_key_no_route_answers_401() -> None:
    document = create_app(Settings()).openapi()
    assert "securitySchemes" not in document["components"]
    assert all("401" not in op["responses"] for ops in document["paths"].values() for op in ops.values())
