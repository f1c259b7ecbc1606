"""SharedVoiceStore: one voice library in S3 for every instance of an endpoint, this machine's disk as its cache.

On an endpoint that scales out, a voice saved through one instance must speak on the
next, and survive the instance (issue 33). S3 is the source of truth; the local
``store.VoiceStore`` under ``<data dir>/s3-cache/`` keeps copies so that a voice in use
costs no S3 request per utterance. Layout under ``s3://bucket/prefix/``::

    voices/<name key>.json          the claim: the voice's metadata and id; the voice exists exactly while it does
    items/<id>/audio.flac           normalised 24 kHz mono reference
    items/<id>/prompt-<key>.pt      clone prompt per model (``prompts.model_key``), engine and model in its metadata

Whole or none, across instances, by ordering (each object is written whole by S3):

1. *add*: audio and prompts go up under a fresh random id first; then the claim is
   written with ``If-None-Match: *`` — S3's conditional write — which exactly one of
   any number of instances racing for a name wins; the others get the same 409 as
   on one machine and remove their objects. A crash before the claim leaves objects
   no claim names: no voice.
2. *delete*: the claim goes first, and only if unchanged (``If-Match`` its ETag, so
   a voice re-added meanwhile under the name is not removed); then the objects.
3. *prompt*: written under the voice's id; kept only if the claim still names it.

Freshness: S3's answer about a name (there, with which id; or not there) is trusted
for ``fresh_s`` (1 s): within it a lookup is served from the cache, and after it
the next lookup asks S3 again (one GET of the small claim) before answering — so a
voice saved on another instance is found by the first request that names it here,
a name no one saved reaches S3 at most about once a second, and a delete elsewhere
is seen here within a second. A listing always reads S3.

S3 unreachable: library calls (list, add, delete, get, export, import) raise
``LibraryUnavailableError`` (503 with the reason); a lookup for speech is served
from the cache when the voice is there, so cached voices keep speaking — across a
restart too — and the cache catches up when S3 answers again. Objects of a save or
delete that crashed halfway stay in the bucket unnamed by any claim (invisible;
``docs/server.md`` says how to find them). Everything here blocks: the server calls
it through ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from speakwire.errors import ConflictError, InsufficientStorageError, LibraryUnavailableError, NotFoundError
from speakwire.voices.audio import AUDIO_FILE, ReferenceAudio
from speakwire.voices.changes import Marker
from speakwire.voices.fields import VoiceFields
from speakwire.voices.models import PromptRecord, SavedVoice
from speakwire.voices.names import is_valid_name, name_key
from speakwire.voices.prompts import model_key
from speakwire.voices.s3 import ObjectExistsError, S3Location, S3Object, S3Objects
from speakwire.voices.store import DEFAULT_MAX_VOICES, PromptFile, VoiceStore, name_taken, new_voice

logger = logging.getLogger(__name__)

FRESH_S = 1.0
"""How long S3's answer about one name is trusted before the next lookup asks again."""
CLAIM_FORMAT = "speakwire.voice-claim"
CLAIM_VERSION = 1
CACHE_DIR = "s3-cache"
_LIST_THREADS = 8
_NAMES_REMEMBERED = 4096
_PROMPT_OBJECT = re.compile(r"prompt-([0-9a-f]{32})\.pt")
_CLAIM_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "name": (str,),
    "consent": (str,),
    "created_at": (int, float),
    "duration_s": (int, float),
    "ref_text": (str, type(None)),
    "speaker_description": (str, type(None)),
    "language": (str, type(None)),
    "file_size": (int,),
    "mime_type": (str,),
    "audio_sha256": (str,),
}


class SharedVoiceStore:
    """The library in S3, cached in a local ``VoiceStore``; the same interface (``backend.VoiceBackend``)."""

    def __init__(
        self, objects: S3Objects, cache: VoiceStore, *, max_voices: int = DEFAULT_MAX_VOICES, fresh_s: float = FRESH_S
    ) -> None:
        self.objects = objects
        self.cache = cache
        self.max_voices = max_voices
        self.fresh_s = fresh_s
        self._checked: dict[str, float] = {}
        """name key → when S3 last answered for it; the cache then holds exactly S3's answer."""
        self._claims: dict[str, tuple[str, SavedVoice]] = {}
        """name key → (claim ETag, its voice): a listing reads only the claims that changed."""
        self._lock = threading.Lock()
        self._name_locks: weakref.WeakValueDictionary[str, threading.RLock] = weakref.WeakValueDictionary()
        """name key → its lock, for as long as a thread holds or waits for it (then it goes by itself)."""

    @classmethod
    def connect(
        cls, location: S3Location, data_dir: str | Path, *, max_voices: int = DEFAULT_MAX_VOICES
    ) -> SharedVoiceStore:
        """The library at ``location`` with its cache under ``<data_dir>/s3-cache/<bucket>/<prefix>``: never the
        local library, which a cache eviction must not touch."""
        cache_dir = Path(data_dir).expanduser() / CACHE_DIR / location.bucket / (location.prefix.strip("/") or "_")
        return cls(S3Objects.connect(location), VoiceStore(cache_dir, max_voices=2**31), max_voices=max_voices)

    @property
    def location(self) -> str:
        return self.objects.location.url

    # ----- lifetime ------------------------------------------------------------------------

    def open(self) -> SharedVoiceStore:
        """Open the cache; an S3 that does not answer yet is logged, not fatal (the cache serves meanwhile)."""
        self.cache.open()
        try:
            self.objects.check()
        except LibraryUnavailableError as exc:
            logger.warning("voices: %s", exc.message)
        return self

    def close(self) -> None:
        self.cache.close()

    def __enter__(self) -> SharedVoiceStore:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- reading -------------------------------------------------------------------------

    def find(self, name: str) -> SavedVoice | None:
        """The voice called ``name``, or None: from the cache while S3's answer is fresh, else after asking S3;
        when S3 does not answer, a cached voice still (speech goes on), else ``LibraryUnavailableError``."""
        if not is_valid_name(name):  # a client's voice field, any string: no S3 request for what cannot exist
            return None
        if self._fresh(name_key(name)):
            return self.cache.find(name)
        try:
            return self._refresh(name, reuse_fresh=True)
        except LibraryUnavailableError:
            cached = self.cache.find(name)
            if cached is None:
                raise
            return cached

    def get(self, name: str) -> SavedVoice:
        """The voice called ``name``, as S3 has it now.

        Raises:
            NotFoundError: No such voice.
            LibraryUnavailableError: S3 does not answer.
        """
        voice = self._refresh(name) if is_valid_name(name) else None
        if voice is None:
            raise NotFoundError(f"Voice '{name}' not found", param="name")
        return voice

    def list_voices(self) -> list[SavedVoice]:
        """Every instance's voices, oldest first: one LIST, and a GET for each claim not seen before."""
        started = time.monotonic()
        listed = {name: etag for key, etag in self.objects.list("voices/") if (name := _claim_key_name(key))}
        unknown = [key for key, etag in listed.items() if key not in self._claims or self._claims[key][0] != etag]
        if unknown:
            with ThreadPoolExecutor(min(_LIST_THREADS, len(unknown))) as pool:
                claims = pool.map(lambda k: self.objects.get(_claim_key(k)), unknown)
                for key, claim in zip(unknown, claims, strict=True):
                    if claim is None:  # deleted since the listing
                        listed.pop(key)
                        continue
                    with self._lock:
                        self._claims[key] = (claim.etag, _voice_from_claim(claim.data))
        voices: list[SavedVoice] = []
        for key in listed:
            voice = self._claims[key][1]
            cached = self.cache.find(key)
            voices.append(cached if cached is not None and cached.id == voice.id else voice)
        for key in self.cache.name_keys() - set(listed):
            with self._name_lock(key):
                if self._checked.get(key, 0.0) < started:  # not (re)saved here since the listing began
                    self._evict(key)
        return sorted(voices, key=lambda v: (v.created_at, name_key(v.name)))

    def name_keys(self) -> frozenset[str]:
        """The cached names (an index that cannot say "not saved": ``change_marker`` is None)."""
        return self.cache.name_keys()

    def change_marker(self) -> Marker | None:
        """None: another instance's save moves nothing on this disk, so only ``find`` can tell."""
        return None

    def count(self) -> int:
        return len(self._claimed())

    def _claimed(self) -> set[str]:
        """The name keys S3 holds a claim for now (one LIST per thousand voices)."""
        return {name for key, _ in self.objects.list("voices/") if (name := _claim_key_name(key))}

    def read_audio(self, voice: SavedVoice) -> bytes:
        try:
            return self.cache.read_audio(voice)
        except NotFoundError:
            found = self.objects.get(_item(voice.id, AUDIO_FILE))
            if found is None:
                raise NotFoundError(f"Voice '{voice.name}' not found (it was deleted)", param="name") from None
            return found.data

    def read_prompt(self, voice: SavedVoice, engine: str, model: str) -> bytes | None:
        """The cached prompt, else one another instance saved (then cached here), else None."""
        data = self.cache.read_prompt(voice, engine, model)
        if data is not None:
            return data
        try:
            found = self.objects.get(_item(voice.id, _prompt_object(model_key(engine, model))))
        except LibraryUnavailableError as exc:
            logger.warning("voices: %s", exc.message)
            return None
        if found is None:
            return None
        try:
            self.cache.save_prompt(voice, PromptFile(engine, model, found.data))
        except InsufficientStorageError as exc:  # the prompt is in hand: speech need not fail for the cache
            logger.warning("voices: not caching the clone prompt of '%s' here: %s", voice.name, exc.message)
        return found.data

    # ----- writing -------------------------------------------------------------------------

    def add(
        self,
        fields: VoiceFields,
        audio: ReferenceAudio,
        *,
        prompts: Sequence[PromptFile] = (),
        created_at: float | None = None,
    ) -> SavedVoice:
        """Save a voice for every instance: all of it, or none (see the module docstring).

        Raises:
            ConflictError: The name is taken (by any instance, also in a race), or the library is full.
            LibraryUnavailableError: S3 does not answer; nothing was saved.
        """
        key = name_key(fields.name)
        claims = self._claimed()
        if key in claims:
            raise name_taken(fields.name)
        if len(claims) >= self.max_voices:
            raise _full(len(claims), self.max_voices)
        voice = new_voice(fields, audio, prompts, created_at=created_at)
        uploaded: list[str] = []
        try:
            for object_key, data, metadata in _objects_of(voice, audio.flac, prompts):
                self.objects.put(object_key, data, metadata=metadata)
                uploaded.append(object_key)
        except BaseException:
            self._remove_objects(uploaded)
            raise
        try:
            etag = self.objects.put(_claim_key(key), _claim(voice), if_absent=True)  # the voice comes into being
        except Exception as exc:
            landed = self._claim_landed(key, voice, uploaded, exc)
            if landed is None:
                if isinstance(exc, ObjectExistsError):
                    raise name_taken(fields.name) from None
                raise
            etag = landed
        with self._lock:
            self._claims[key] = (etag, replace(voice, prompts=()))
        self._cache_copy(voice, audio.flac, prompts)
        logger.info("voices: saved '%s' in %s (%.1f s)", voice.name, self.location, voice.duration_s)
        return voice

    def _claim_landed(self, key: str, voice: SavedVoice, uploaded: list[str], error: Exception) -> str | None:
        """After the claim's write failed: its ETag if it landed all the same, else None, the uploads removed.

        A write can land and its answer be lost (a timeout; boto3's retry then finds the key taken, a 412): the
        claim is read back, and the voice is saved if it holds this voice. Only when it does not (absent, or
        another instance's) do the uploads go; when S3 cannot tell, they stay (invisible unless the claim landed).
        """
        try:
            landed = self.objects.get(_claim_key(key), even_if_quiet=True)
        except LibraryUnavailableError:
            logger.warning("voices: saving '%s': the claim's write failed (%s) and S3 cannot say whether it landed; "
                           "its files are kept", voice.name, error)  # fmt: skip
            return None
        if landed is not None and _voice_from_claim(landed.data).id == voice.id:
            logger.warning("voices: saving '%s': the claim's write answered %s but landed; saved", voice.name, error)
            return landed.etag
        self._remove_objects(uploaded)
        return None

    def delete(self, name: str) -> SavedVoice:
        """Remove a voice for every instance: its claim first (only the voice read here), then its objects.

        Raises:
            NotFoundError: No such voice (or it was deleted or replaced meanwhile).
            LibraryUnavailableError: S3 does not answer.
        """
        key = name_key(name)
        claim = self.objects.get(_claim_key(key))
        if claim is None or not self.objects.delete(_claim_key(key), if_match=claim.etag):
            self._evict(key)
            raise NotFoundError(f"Voice '{name}' not found", param="name")
        voice = _voice_from_claim(claim.data)
        self._evict(key)
        self._remove_objects([k for k, _ in self.objects.list(_item(voice.id, ""))])
        logger.info("voices: deleted '%s' from %s", voice.name, self.location)
        return voice

    def save_prompt(self, voice: SavedVoice, prompt: PromptFile) -> PromptRecord | None:
        """Share a clone prompt computed here with every instance; None if the voice was deleted meanwhile."""
        key = model_key(prompt.engine, prompt.model)
        record = PromptRecord(prompt.engine, prompt.model, key, time.time())
        object_key = _item(voice.id, _prompt_object(key))
        self.objects.put(object_key, prompt.data, metadata=_prompt_metadata(record))
        claim = self.objects.get(_claim_key(name_key(voice.name)))
        if claim is None or _voice_from_claim(claim.data).id != voice.id:
            self.objects.delete(object_key)
            return None
        self.cache.save_prompt(voice, prompt)
        return record

    # ----- the cache -----------------------------------------------------------------------

    def _fresh(self, key: str) -> bool:
        checked = self._checked.get(key)
        return checked is not None and time.monotonic() - checked < self.fresh_s

    def _refresh(self, name: str, *, reuse_fresh: bool = False) -> SavedVoice | None:
        """Ask S3 for ``name`` and make the cache agree: one GET, plus the voice's objects when new here.
        ``reuse_fresh``: a concurrent lookup that asked while this one waited for the name's lock answers."""
        key = name_key(name)
        with self._name_lock(key):
            if reuse_fresh and self._fresh(key):
                return self.cache.find(key)
            claim = self.objects.get(_claim_key(key))
            if claim is None:
                self._evict(key)
                return None
            return self._cached_or_pulled(key, claim)

    def _cached_or_pulled(self, key: str, claim: S3Object) -> SavedVoice | None:
        """The claimed voice from the cache, else downloaded into it; marks the name fresh when they agree."""
        claimed = _voice_from_claim(claim.data)
        with self._lock:
            self._claims[key] = (claim.etag, claimed)
        cached = self.cache.find(key)
        if cached is not None and cached.id == claimed.id:
            self._checked[key] = time.monotonic()
            return cached
        objects = dict(self.objects.list(_item(claimed.id, "")))
        audio = self.objects.get(_item(claimed.id, AUDIO_FILE))
        if audio is None:
            self._evict(key)  # its delete is under way elsewhere
            return None
        prompts: list[PromptFile] = []
        records: list[PromptRecord] = []
        for object_key in objects:
            match = _PROMPT_OBJECT.fullmatch(object_key.rpartition("/")[2])
            found = self.objects.get(object_key) if match else None
            record = _prompt_record(match.group(1), found) if match and found else None
            if record is not None and found is not None:
                records.append(record)
                prompts.append(PromptFile(record.engine, record.model, found.data))
        voice = replace(claimed, prompts=tuple(records))
        self._cache_copy(voice, audio.data, prompts)
        return self.cache.find(key) or voice

    def _cache_copy(self, voice: SavedVoice, flac: bytes, prompts: Sequence[PromptFile]) -> None:
        """Keep a copy here (replacing another voice of the name: deleted and saved again elsewhere), and mark
        the name fresh; a failure is logged and only costs S3 reads later (the voice is in S3 either way)."""
        key = name_key(voice.name)
        with self._name_lock(key):
            cached = self.cache.find(key)
            if cached is None or cached.id != voice.id:
                if cached is not None:
                    self._evict(key)
                try:
                    self.cache.insert(voice, flac, prompts)
                except Exception:
                    logger.exception("voices: could not cache '%s' in %s", voice.name, self.cache.location)
                    self._checked.pop(key, None)
                    return
            self._checked[key] = time.monotonic()

    def _evict(self, key: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.cache.delete(key)
        self._checked[key] = time.monotonic()

    def _remove_objects(self, keys: Sequence[str]) -> None:
        for object_key in keys:
            try:
                self.objects.delete(object_key)
            except LibraryUnavailableError as exc:  # left unnamed by any claim: invisible
                logger.warning("voices: could not remove %s: %s", object_key, exc.message)

    def _name_lock(self, key: str) -> threading.RLock:
        """One refresh of a name at a time (re-entrant: a refresh copies into the cache under it too).

        A lock lives while someone holds it or waits for it, so however many names clients send, a name's lock
        is never forgotten and replaced while a refresh of it runs (which let two refreshes of one name run at
        once); what stays remembered is only when S3 last answered for each name, and stale answers are dropped.
        """
        with self._lock:
            if len(self._checked) > _NAMES_REMEMBERED:  # clients send any names: forget the stale answers
                now = time.monotonic()
                for stale in [k for k, t in list(self._checked.items()) if now - t >= self.fresh_s]:
                    self._checked.pop(stale, None)
            lock = self._name_locks.get(key)
            if lock is None:
                lock = self._name_locks[key] = threading.RLock()
            return lock


def _claim_key(key: str) -> str:
    return f"voices/{key}.json"


def _claim_key_name(object_key: str) -> str | None:
    """The name key a claim's object key holds, or None for anything else under ``voices/``."""
    name = object_key.removeprefix("voices/")
    return name.removesuffix(".json") if name.endswith(".json") and "/" not in name else None


def _item(voice_id: str, file: str) -> str:
    return f"items/{voice_id}/{file}"


def _prompt_object(key: str) -> str:
    return f"prompt-{key}.pt"


def _objects_of(voice: SavedVoice, flac: bytes, prompts: Sequence[PromptFile]) -> list[tuple[str, bytes, Any]]:
    objects: list[tuple[str, bytes, Any]] = [(_item(voice.id, AUDIO_FILE), flac, None)]
    for prompt, record in zip(prompts, voice.prompts, strict=True):
        objects.append((_item(voice.id, _prompt_object(record.key)), prompt.data, _prompt_metadata(record)))
    return objects


def _prompt_metadata(record: PromptRecord) -> dict[str, str]:
    """S3 metadata is ASCII: model ids (paths, hub ids) are percent-encoded."""
    return {"engine": quote(record.engine), "model": quote(record.model), "created-at": f"{record.created_at:.3f}"}


def _prompt_record(key: str, found: S3Object) -> PromptRecord | None:
    try:
        engine, model = unquote(found.metadata["engine"]), unquote(found.metadata["model"])
        created_at = float(found.metadata.get("created-at", "0"))
    except (KeyError, ValueError):
        return None
    return PromptRecord(engine, model, key, created_at) if model_key(engine, model) == key else None


def _claim(voice: SavedVoice) -> bytes:
    body = {name: getattr(voice, name) for name in _CLAIM_FIELDS}
    return json.dumps({"format": CLAIM_FORMAT, "version": CLAIM_VERSION, "voice": body}, sort_keys=True).encode()


def _voice_from_claim(data: bytes) -> SavedVoice:
    """The voice a claim names.

    Raises:
        LibraryUnavailableError: Not a claim this speakwire can read (written by a newer one, or damaged).
    """
    try:
        parsed = json.loads(data)
        body = parsed["voice"]
        ok = parsed.get("format") == CLAIM_FORMAT and parsed.get("version") == CLAIM_VERSION
        ok = ok and all(isinstance(body.get(name), kinds) for name, kinds in _CLAIM_FIELDS.items())
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise LibraryUnavailableError(
            "The shared voice library holds a voice record this speakwire cannot read (written by a newer version, "
            "or damaged); upgrade speakwire, or delete that voice."
        )
    return SavedVoice(**{name: body[name] for name in _CLAIM_FIELDS})


def _full(count: int, limit: int) -> ConflictError:
    return ConflictError(
        f"The voice library is full ({count} voices; the limit is {limit}, set by --max-voices or "
        "SPEAKWIRE_MAX_VOICES). Delete a voice first.",
        param="name",
    )
