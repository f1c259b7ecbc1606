"""Reach a voice library wherever it lives: a data dir on this machine, or a running server's API.

Both backends offer the same five operations and answer in the API's shapes
(the ``uploaded_voices`` entries), so ``speakwire voices`` behaves the same on a
laptop's library, a build step baking voices into an image, and a live
endpoint. A local library gets no clone prompts at upload (there is no engine
here); the server computes one on the voice's first use and keeps it.
"""

from __future__ import annotations

from typing import Any, Protocol

from speakwire.errors import SpeakwireError
from speakwire.voices import archive
from speakwire.voices.audio import normalise_reference
from speakwire.voices.backend import open_backend
from speakwire.voices.fields import VoiceFields
from speakwire.voices.models import SavedVoice


class VoiceLibraryClient(Protocol):
    """The operations ``speakwire voices`` needs; each raises ``SpeakwireError`` with a message for the user."""

    @property
    def location(self) -> str: ...

    def add(self, fields: VoiceFields, audio: bytes, *, mime_type: str | None) -> dict[str, Any]: ...

    def list_voices(self) -> list[dict[str, Any]]: ...

    def remove(self, name: str) -> str: ...

    def export(self, name: str) -> tuple[str, bytes]:
        """The voice's canonical name and its ``.swv`` bytes."""
        ...

    def import_archive(self, data: bytes, *, name: str | None = None) -> dict[str, Any]: ...

    def close(self) -> None: ...


class LocalVoiceClient:
    """A library opened directly: the one in a data dir (safe while a server uses the same dir), or with
    ``voices_url`` the shared one in S3 that an endpoint's instances use (the data dir then holds the cache)."""

    def __init__(self, data_dir: str, *, voices_url: str | None = None) -> None:
        self._store = open_backend(data_dir, voices_url=voices_url).open()

    @property
    def location(self) -> str:
        return self._store.location

    def add(self, fields: VoiceFields, audio: bytes, *, mime_type: str | None) -> dict[str, Any]:
        reference = normalise_reference(audio, mime_type=mime_type)
        return _local(self._store.add(fields, reference))

    def list_voices(self) -> list[dict[str, Any]]:
        return [_local(voice) for voice in self._store.list_voices()]

    def remove(self, name: str) -> str:
        voice = self._store.delete(name)
        return f"Voice '{voice.name}' deleted successfully"

    def export(self, name: str) -> tuple[str, bytes]:
        voice = self._store.get(name)
        return voice.name, archive.export_voice(self._store, voice.name)

    def import_archive(self, data: bytes, *, name: str | None = None) -> dict[str, Any]:
        return _local(archive.import_voice(self._store, data, name=name))

    def close(self) -> None:
        self._store.close()


class RemoteVoiceClient:
    """A running server's ``/v1/audio/voices`` API."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 300.0) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._url = url.rstrip("/")
        self._http = httpx.Client(base_url=self._url, headers=headers, timeout=timeout_s)

    @property
    def location(self) -> str:
        return self._url

    def add(self, fields: VoiceFields, audio: bytes, *, mime_type: str | None) -> dict[str, Any]:
        form = {key: value for key, value in _form(fields).items() if value is not None}
        files = {"audio_sample": ("reference", audio, mime_type or "application/octet-stream")}
        voice: dict[str, Any] = self._call("POST", "/v1/audio/voices", data=form, files=files)["voice"]
        return voice

    def list_voices(self) -> list[dict[str, Any]]:
        voices: list[dict[str, Any]] = self._call("GET", "/v1/audio/voices")["uploaded_voices"]
        return voices

    def remove(self, name: str) -> str:
        return str(self._call("DELETE", f"/v1/audio/voices/{_path(name)}")["message"])

    def export(self, name: str) -> tuple[str, bytes]:
        response = self._http.get(f"/v1/audio/voices/{_path(name)}/export")
        _raise_for(response)
        disposition = response.headers.get("content-disposition", "")
        exported = disposition.split('filename="', 1)[-1].removesuffix('"').removesuffix(archive.SUFFIX)
        return exported or name, response.content

    def import_archive(self, data: bytes, *, name: str | None = None) -> dict[str, Any]:
        form = {"name": name} if name else {}
        files = {"file": (f"voice{archive.SUFFIX}", data, archive.MEDIA_TYPE)}
        voice: dict[str, Any] = self._call("POST", "/v1/audio/voices/import", data=form, files=files)["voice"]
        return voice

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise SpeakwireError(f"cannot reach {self._url}: {exc}") from exc
        _raise_for(response)
        body: dict[str, Any] = response.json()
        return body


def _raise_for(response: Any) -> None:
    """A failed answer as a ``SpeakwireError`` carrying the server's own message (either error shape)."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except ValueError:
        body = {}
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    raise SpeakwireError(f"HTTP {response.status_code}: {message or response.text[:200]}")


def _path(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _form(fields: VoiceFields) -> dict[str, str | None]:
    return {
        "name": fields.name,
        "consent": fields.consent,
        "ref_text": fields.ref_text,
        "speaker_description": fields.speaker_description,
        "language": fields.language,
    }


def _local(voice: SavedVoice) -> dict[str, Any]:
    body = voice.describe()
    body["compatibility"] = {
        "prompts": [{"engine": p.engine, "model": p.model, "created_at": int(p.created_at)} for p in voice.prompts]
    }
    return body
