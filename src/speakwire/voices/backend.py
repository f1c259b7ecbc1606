"""Where the voice library lives, chosen once by ``--voices-url``: this machine's disk, or S3 shared by instances.

Every caller — the server's ``VoiceLibrary``, ``archive`` and ``speakwire voices`` — talks
to the ``VoiceBackend`` protocol below, and ``open_backend`` picks the implementation by
the URL's scheme, as uvicorn picks its protocol by name: none means the local
``store.VoiceStore`` (the default: no bucket on a laptop), ``s3://bucket/prefix`` the
``shared.SharedVoiceStore``, which keeps the local store as its cache. Every method
blocks; the server calls them through ``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from speakwire.voices.audio import ReferenceAudio
from speakwire.voices.changes import Marker
from speakwire.voices.fields import VoiceFields
from speakwire.voices.models import PromptRecord, SavedVoice
from speakwire.voices.s3 import VOICES_URL_ENV, S3Location
from speakwire.voices.store import DEFAULT_MAX_VOICES, PromptFile, VoiceStore


class VoiceBackend(Protocol):
    """A voice library: the store's interface, whatever keeps the voices."""

    @property
    def location(self) -> str:
        """Where the library lives, for messages (a directory, or ``s3://bucket/prefix``)."""
        ...

    def open(self) -> VoiceBackend: ...

    def close(self) -> None: ...

    def find(self, name: str) -> SavedVoice | None: ...

    def get(self, name: str) -> SavedVoice: ...

    def list_voices(self) -> list[SavedVoice]: ...

    def name_keys(self) -> frozenset[str]: ...

    def change_marker(self) -> Marker | None:
        """A value that moves with every change (``changes``), or None when only ``find`` can tell."""
        ...

    def read_audio(self, voice: SavedVoice) -> bytes: ...

    def read_prompt(self, voice: SavedVoice, engine: str, model: str) -> bytes | None: ...

    def add(
        self,
        fields: VoiceFields,
        audio: ReferenceAudio,
        *,
        prompts: Sequence[PromptFile] = (),
        created_at: float | None = None,
    ) -> SavedVoice: ...

    def delete(self, name: str) -> SavedVoice: ...

    def save_prompt(self, voice: SavedVoice, prompt: PromptFile) -> PromptRecord | None: ...


def voices_url_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """``$SPEAKWIRE_VOICES_URL``, or None (the local library)."""
    import os

    value = (os.environ if environ is None else environ).get(VOICES_URL_ENV, "").strip()
    return value or None


def open_backend(
    data_dir: str | Path, *, voices_url: str | None = None, max_voices: int = DEFAULT_MAX_VOICES
) -> VoiceBackend:
    """The library ``voices_url`` names (``s3://bucket/prefix``; None: the one in ``data_dir``), not yet opened.

    With a URL, ``data_dir`` holds the cache.

    Raises:
        ValueError: A URL of a scheme we do not serve, or without a bucket.
        MissingExtraError: ``s3://`` without boto3 (``pip install "speakwire[s3]"``).
    """
    if not voices_url:
        return VoiceStore(data_dir, max_voices=max_voices)
    location = S3Location.parse(voices_url)
    from speakwire.voices.shared import SharedVoiceStore

    return SharedVoiceStore.connect(location, data_dir, max_voices=max_voices)
