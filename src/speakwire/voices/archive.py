"""One-file voice export (``.swv``): ship a voice made on a laptop to a server, an endpoint or an image.

A ``.swv`` file is a zip holding::

    metadata.json        {"format": "speakwire.voice", "version": 1, "voice": {...}, "audio": {...}, "prompts": [...]}
    audio.flac           the normalised 24 kHz mono reference
    prompts/<key>.pt     optional clone prompts, one per model that computed one

A zip because every platform opens one and it needs no new dependency. Imports
trust nothing in it: only those member names are accepted, every member is read
with a size cap (so a lying header cannot inflate), checksums must match, the
metadata passes the same validation as an upload, and the audio is decoded and
re-normalised as if uploaded. Prompts are checked with ``torch.load(
weights_only=True)`` where torch is installed; elsewhere they are kept as they
are and checked when first used (a bad one is then recomputed, never used).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import time
import zipfile
from dataclasses import dataclass
from typing import Any

from speakwire.errors import BadRequestError, PayloadTooLargeError
from speakwire.voices.audio import AUDIO_FILE, MAX_AUDIO_BYTES, ReferenceAudio, normalise_reference
from speakwire.voices.backend import VoiceBackend
from speakwire.voices.fields import VoiceFields, voice_fields
from speakwire.voices.models import SavedVoice
from speakwire.voices.prompts import MAX_PROMPT_BYTES, PromptMismatchError, model_key, read_payload
from speakwire.voices.store import PromptFile

FORMAT = "speakwire.voice"
VERSION = 1
SUFFIX = ".swv"
MEDIA_TYPE = "application/zip"
MAX_ARCHIVE_BYTES = 16 * 1024 * 1024
MAX_PROMPTS = 64
_METADATA = "metadata.json"
_MAX_METADATA_BYTES = 64 * 1024
_PROMPT_MEMBER = re.compile(r"prompts/([0-9a-f]{32})\.pt")


@dataclass(frozen=True, slots=True)
class VoiceArchive:
    """A validated archive, ready for ``VoiceStore.add``."""

    fields: VoiceFields
    audio: ReferenceAudio
    prompts: tuple[PromptFile, ...]
    created_at: float


def export_voice(store: VoiceBackend, name: str) -> bytes:
    """The ``.swv`` bytes of a saved voice, with every prompt it has. Blocking.

    Raises:
        NotFoundError: No such voice.
    """
    voice = store.get(name)
    audio = store.read_audio(voice)
    prompts = [
        (p.engine, p.model, data) for p in voice.prompts if (data := store.read_prompt(voice, p.engine, p.model))
    ]
    return pack(voice, audio, prompts)


def import_voice(store: VoiceBackend, data: bytes, *, name: str | None = None) -> SavedVoice:
    """Validate a ``.swv`` file and save its voice (as ``name`` when given). Blocking.

    Raises:
        BadRequestError: Not a valid voice file (the message says what is wrong).
        PayloadTooLargeError: Over ``MAX_ARCHIVE_BYTES`` or a member over its limit.
        ConflictError: The name is taken, or the library is full.
    """
    archive = read_archive(data, name=name)
    return store.add(archive.fields, archive.audio, prompts=archive.prompts, created_at=archive.created_at)


def pack(voice: SavedVoice, audio: bytes, prompts: list[tuple[str, str, bytes]]) -> bytes:
    """Write the zip: metadata, audio and prompts (already-compressed payloads are stored, not deflated)."""
    entries = [
        {"engine": engine, "model": model, "file": f"prompts/{model_key(engine, model)}.pt", "sha256": _sha256(data)}
        for engine, model, data in prompts
    ]
    metadata = {
        "format": FORMAT,
        "version": VERSION,
        "voice": {
            "name": voice.name,
            "consent": voice.consent,
            "created_at": voice.created_at,
            "ref_text": voice.ref_text,
            "speaker_description": voice.speaker_description,
            "language": voice.language,
            "file_size": voice.file_size,
            "mime_type": voice.mime_type,
            "duration": voice.duration_s,
        },
        "audio": {"file": AUDIO_FILE, "sha256": _sha256(audio), "sample_rate": 24_000, "channels": 1},
        "prompts": entries,
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(_METADATA, json.dumps(metadata, indent=2, ensure_ascii=False), zipfile.ZIP_DEFLATED)
        archive.writestr(AUDIO_FILE, audio, zipfile.ZIP_STORED)
        for entry, (_, _, data) in zip(entries, prompts, strict=True):
            archive.writestr(entry["file"], data, zipfile.ZIP_STORED)
    return buffer.getvalue()


def read_archive(data: bytes, *, name: str | None = None) -> VoiceArchive:
    """Check every part of a ``.swv`` file; blocking (decodes the audio).

    Raises:
        BadRequestError: What is wrong, naming the member or field.
        PayloadTooLargeError: The file, or one of its members, is over its limit.
    """
    if len(data) > MAX_ARCHIVE_BYTES:
        raise PayloadTooLargeError(
            f"The voice file is {len(data) / 2**20:.1f} MiB; the limit is {MAX_ARCHIVE_BYTES // 2**20} MiB.",
            param="file",
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = _members(archive)
            metadata = _metadata(_read(archive, _METADATA, _MAX_METADATA_BYTES))
            audio_bytes = _read(archive, AUDIO_FILE, MAX_AUDIO_BYTES)
            prompt_bytes = {
                member: _read(archive, member, MAX_PROMPT_BYTES)
                for member in members
                if _PROMPT_MEMBER.fullmatch(member)
            }
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, NotImplementedError) as exc:
        raise BadRequestError(f"Not a speakwire voice file (.swv, a zip): {exc}", param="file") from exc
    voice = metadata["voice"]
    fields = voice_fields(
        name=name if name is not None else voice.get("name"),
        consent=voice.get("consent"),
        ref_text=voice.get("ref_text"),
        speaker_description=voice.get("speaker_description"),
        language=voice.get("language"),
    )
    _check_sha256(audio_bytes, metadata["audio"].get("sha256"), AUDIO_FILE)
    audio = normalise_reference(audio_bytes, mime_type="audio/flac", param="audio.flac")
    file_size, mime_type = voice.get("file_size"), voice.get("mime_type")
    if isinstance(file_size, int) and 0 < file_size <= MAX_AUDIO_BYTES:
        audio = dataclasses.replace(audio, source_size=file_size)
    if isinstance(mime_type, str) and 0 < len(mime_type) <= 100:
        audio = dataclasses.replace(audio, mime_type=mime_type)
    created_at = voice.get("created_at")
    return VoiceArchive(
        fields=fields,
        audio=audio,
        prompts=_prompts(metadata["prompts"], prompt_bytes, fields),
        created_at=float(created_at) if isinstance(created_at, int | float) and created_at > 0 else time.time(),
    )


def _members(archive: zipfile.ZipFile) -> set[str]:
    names = [info.filename for info in archive.infolist()]
    if len(names) != len(set(names)):
        raise BadRequestError("The voice file has duplicate members.", param="file")
    unknown = sorted(n for n in names if n not in (_METADATA, AUDIO_FILE) and not _PROMPT_MEMBER.fullmatch(n))
    if unknown:
        raise BadRequestError(
            f"The voice file holds unexpected members: {', '.join(unknown[:5])}. A .swv file holds metadata.json, "
            "audio.flac and prompts/<key>.pt only.",
            param="file",
        )
    for required in (_METADATA, AUDIO_FILE):
        if required not in names:
            raise BadRequestError(f"The voice file has no {required}.", param="file")
    if len(names) - 2 > MAX_PROMPTS:
        raise BadRequestError(f"The voice file holds more than {MAX_PROMPTS} prompts.", param="file")
    return set(names)


def _read(archive: zipfile.ZipFile, member: str, limit: int) -> bytes:
    """A member's bytes, refusing to inflate past ``limit`` whatever its header claims."""
    with archive.open(member) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise PayloadTooLargeError(f"{member} in the voice file is over {limit // 1024} KiB.", param="file")
    return data


def _metadata(data: bytes) -> dict[str, Any]:
    try:
        metadata = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"metadata.json in the voice file is not valid JSON: {exc}", param="file") from exc
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise BadRequestError(f"metadata.json does not describe a speakwire voice (format {FORMAT!r}).", param="file")
    version = metadata.get("version")
    if not isinstance(version, int) or version < 1:
        raise BadRequestError("metadata.json has no valid version.", param="file")
    if version > VERSION:
        raise BadRequestError(
            f"The voice file is format version {version}; this speakwire reads version {VERSION}. Upgrade speakwire.",
            param="file",
        )
    for key, kind in (("voice", dict), ("audio", dict), ("prompts", list)):
        if not isinstance(metadata.get(key), kind):
            raise BadRequestError(f"metadata.json has no valid '{key}'.", param="file")
    return metadata


def _prompts(entries: list[Any], files: dict[str, bytes], fields: VoiceFields) -> tuple[PromptFile, ...]:
    prompts: list[PromptFile] = []
    listed: set[str] = set()
    for entry in entries:
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("engine", "model", "file")):
            raise BadRequestError("metadata.json lists a prompt without engine, model and file.", param="file")
        engine, model, member = entry["engine"], entry["model"], entry["file"]
        if member != f"prompts/{model_key(engine, model)}.pt" or member not in files or member in listed:
            raise BadRequestError(f"Prompt {member!r} does not match its model or is missing.", param="file")
        listed.add(member)
        _check_sha256(files[member], entry.get("sha256"), member)
        _check_prompt(files[member], engine, model, fields, member)
        prompts.append(PromptFile(engine, model, files[member]))
    if set(files) - listed:
        raise BadRequestError("The voice file holds prompts metadata.json does not list.", param="file")
    return tuple(prompts)


def _check_prompt(data: bytes, engine: str, model: str, fields: VoiceFields, member: str) -> None:
    try:
        import torch  # noqa: F401  (only to learn whether prompts can be checked here)
    except ImportError:
        return  # checked on first use instead, where a bad prompt is recomputed
    try:
        payload = read_payload(data)
    except PromptMismatchError as exc:
        raise BadRequestError(f"{member} is not a valid clone prompt: {exc}", param="file") from exc
    if (payload["engine"], payload["model"]) != (engine, model) or payload["ref_text"] != fields.ref_text:
        raise BadRequestError(f"{member} was computed for another model or transcript.", param="file")


def _check_sha256(data: bytes, expected: object, member: str) -> None:
    if expected is not None and expected != _sha256(data):
        raise BadRequestError(f"{member} in the voice file is damaged (checksum mismatch).", param="file")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
