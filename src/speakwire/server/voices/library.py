"""VoiceLibrary: the voice store as the server uses it — off the event loop, with prompts computed once.

Every store call blocks (SQLite, file I/O, audio decoding) and runs through
``asyncio.to_thread``. A saved voice used in a request becomes a ready clone
prompt here: from memory, else from its file next to the voice (written by an
earlier request, an earlier process, or an imported archive), else computed
once by the engine and written down for every later request and restart.
Computing a prompt is engine work, so it is queued on the engine's scheduler
like a first segment rather than run beside a generation on another thread.
Engines whose prompts cannot be stored get the saved audio and prepare it
themselves (with their own cache); engines that cannot clone refuse the voice
with a message naming what would work.

Most names a request sends are not saved voices (OpenAI's ``alloy``, a typo), and
sending each to a worker thread made it wait behind whole-file encodes for a
"no". So the library keeps the saved names in memory with the database's change
marker (``speakwire.voices.changes``) as of their reading: a name not among them is
answered on the loop while the marker on disk still equals it. Writes through this
library read the names again on their own thread; a write by another process (a
second server on the data dir, ``speakwire voices add``) moves the marker, and the
next lookup reads the names again first — one hop, shared by concurrent lookups.
A name that is there still loads off the loop.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import Engine, EngineInfo, SynthesisRequest
from speakwire.errors import BadRequestError
from speakwire.scheduler import Scheduler
from speakwire.settings import Settings
from speakwire.voices import archive
from speakwire.voices.audio import normalise_reference, read_flac
from speakwire.voices.backend import VoiceBackend, open_backend, voices_url_from_env
from speakwire.voices.changes import Marker
from speakwire.voices.fields import VoiceFields
from speakwire.voices.models import SavedVoice
from speakwire.voices.names import name_key
from speakwire.voices.prompts import PromptMismatchError, dump_prompt, load_prompt, model_key, stores_prompts
from speakwire.voices.store import PromptFile, default_data_dir, max_voices_from_env, name_taken

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
Names = tuple[Marker | None, frozenset[str]]
"""Saved name keys, and the change marker they are current for (None: not known to be current)."""
PROMPTS_IN_MEMORY = 256
"""Loaded prompts kept per process (a few KB each on the host, the same again on the GPU)."""


class VoiceLibrary:
    """The server's voice library."""

    def __init__(self, store: VoiceBackend) -> None:
        self.store = store
        self._prompts: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._locks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = weakref.WeakValueDictionary()
        self._writes: set[asyncio.Task[None]] = set()
        self._names: Names = (None, frozenset())
        self._reading_names: asyncio.Task[None] | None = None
        self.offloaded = 0
        """Calls this library has handed to worker threads (what a lookup the name index answers never adds)."""

    @classmethod
    async def open(cls, settings: Settings) -> VoiceLibrary:
        """The library in ``settings.data_dir`` (default: the per-user data dir), recovered and locked; with
        ``settings.voices_url`` (or ``SPEAKWIRE_VOICES_URL``) the shared one in S3, the data dir its cache."""
        data_dir = settings.data_dir or default_data_dir()
        store = open_backend(
            data_dir,
            voices_url=settings.voices_url or voices_url_from_env(),
            max_voices=settings.max_voices or max_voices_from_env(),
        )
        library = cls(store)
        await library._off_loop(store.open)
        await library._read_names()
        logger.info("voices: library in %s (%d cached here)", store.location, len(library._names[1]))
        return library

    async def close(self) -> None:
        """Finish writing computed prompts, then release the store."""
        pending = [*self._writes, *([self._reading_names] if self._reading_names else [])]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self._off_loop(self.store.close)
        self._prompts.clear()

    # ----- the catalogue -------------------------------------------------------------------

    async def find(self, name: str) -> SavedVoice | None:
        """The saved voice called ``name`` (any case, as ``VoiceStore.find``), or None — answered on the loop when
        the name is not saved and the library has not changed since its names were read (a backend without a
        marker, the shared one, answers on a thread: another instance's save changes nothing here)."""
        marker = self.store.change_marker()
        if marker is not None and marker != self._names[0]:
            await self._read_names()
            marker = self.store.change_marker()
        current, keys = self._names
        if marker is not None and marker == current and name_key(name) not in keys:
            return None
        return await self._off_loop(self.store.find, name)

    async def get(self, name: str) -> SavedVoice:
        return await self._off_loop(self.store.get, name)

    async def list_voices(self) -> list[SavedVoice]:
        return await self._off_loop(self.store.list_voices)

    async def add(
        self,
        fields: VoiceFields,
        data: bytes,
        *,
        mime_type: str | None,
        engine: Engine | None,
        scheduler: Scheduler | None,
        audio_param: str = "audio_sample",
    ) -> SavedVoice:
        """Normalise the upload and save it; with a ready engine that stores prompts, compute its prompt first
        so the voice's first request is as fast as every later one (and a bad reference fails here).
        ``audio_param`` is the clip's field in the client's protocol, named by an error about the audio."""
        if await self.find(fields.name) is not None:  # before the slow part; the store decides races
            raise name_taken(fields.name)
        audio = await self._off_loop(normalise_reference, data, mime_type=mime_type, param=audio_param)
        prompts: tuple[PromptFile, ...] = ()
        item = None
        if engine is not None and scheduler is not None and stores_prompts(engine.info):
            info = engine.info
            item = await _on_engine(scheduler, lambda: _encode(engine, audio.audio, fields.ref_text))
            data = await self._off_loop(dump_prompt, item, engine=info.name, model=info.model)
            prompts = (PromptFile(info.name, info.model, data),)
        voice = await self._write(self.store.add, fields, audio, prompts=prompts)
        if item is not None and engine is not None:
            self._remember((voice.id, model_key(engine.info.name, engine.info.model)), item)
        return voice

    async def delete(self, name: str) -> SavedVoice:
        voice = await self._write(self.store.delete, name)
        for key in [k for k in self._prompts if k[0] == voice.id]:
            del self._prompts[key]
        return voice

    async def export(self, name: str) -> tuple[SavedVoice, bytes]:
        voice = await self.get(name)
        return voice, await self._off_loop(archive.export_voice, self.store, voice.name)

    async def import_archive(self, data: bytes, *, name: str | None = None) -> SavedVoice:
        return await self._write(archive.import_voice, self.store, data, name=name)

    # ----- off the loop, and the name index ------------------------------------------------

    async def _off_loop(self, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        self.offloaded += 1
        return await asyncio.to_thread(func, *args, **kwargs)

    async def _write(self, func: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a write to the store, then read the names again on the same thread, so the next lookup
        need not."""

        def write_and_read() -> tuple[T, Names]:
            result = func(*args, **kwargs)
            return result, _names(self.store)

        result, self._names = await self._off_loop(write_and_read)
        return result

    async def _read_names(self) -> None:
        """Read the saved names again: once for every lookup that finds the library changed meanwhile."""
        if self._reading_names is None:
            self._reading_names = asyncio.create_task(self._install_names())
            self._reading_names.add_done_callback(self._read_names_done)
        await asyncio.shield(self._reading_names)

    async def _install_names(self) -> None:
        self._names = await self._off_loop(_names, self.store)

    def _read_names_done(self, task: asyncio.Task[None]) -> None:
        if self._reading_names is task:
            self._reading_names = None
        if not task.cancelled():
            task.exception()  # retrieved here too: every lookup awaiting it may have been cancelled

    # ----- using a voice -------------------------------------------------------------------

    async def clone_reference(self, voice: SavedVoice, engine: Engine, scheduler: Scheduler) -> Any:
        """What goes in ``SynthesisRequest.ref_audio`` for ``voice``: a ready clone prompt, or the audio.

        Raises:
            BadRequestError: The serving engine cannot clone voices.
        """
        info = engine.info
        if not info.supports_cloning:
            raise BadRequestError(cannot_clone_message(voice.name, info), param="voice")
        if not stores_prompts(info):
            return read_flac(await self._off_loop(self.store.read_audio, voice))
        key = (voice.id, model_key(info.name, info.model))
        if (item := self._recall(key)) is not None:
            return item
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one computation per voice and model, however many requests arrive at once
            if (item := self._recall(key)) is not None:
                return item
            item = await self._off_loop(self._load, voice, info)
            if item is None:
                audio = read_flac(await self._off_loop(self.store.read_audio, voice))
                item = await _on_engine(scheduler, lambda: _encode(engine, audio, voice.ref_text))
                # Written after this request has its prompt, not before: the first audio need not wait for
                # fsyncs. Until the write lands, memory serves; a crash before it only means encoding again.
                write = asyncio.create_task(self._save_prompt(voice, info, item))
                self._writes.add(write)
                write.add_done_callback(self._writes.discard)
            self._remember(key, item)
        return item

    async def _save_prompt(self, voice: SavedVoice, info: EngineInfo, item: Any) -> None:
        try:
            data = await self._off_loop(dump_prompt, item, engine=info.name, model=info.model)
            await self._write(self.store.save_prompt, voice, PromptFile(info.name, info.model, data))
        except Exception:  # the prompt stays in memory; the next process computes it again
            logger.exception("voices: could not save the clone prompt of '%s' for %s", voice.name, info.model)
            return
        logger.info("voices: computed and saved the clone prompt of '%s' for %s", voice.name, info.model)

    def _load(self, voice: SavedVoice, info: EngineInfo) -> Any:
        data = self.store.read_prompt(voice, info.name, info.model)
        if data is None:
            return None
        try:
            return load_prompt(data, info=info, ref_text=voice.ref_text)
        except PromptMismatchError as exc:
            logger.warning("voices: not using the saved prompt of '%s' (%s); computing a new one", voice.name, exc)
            return None

    def _recall(self, key: tuple[str, str]) -> Any:
        item = self._prompts.get(key)
        if item is not None:
            self._prompts.move_to_end(key)
        return item

    def _remember(self, key: tuple[str, str], item: Any) -> None:
        self._prompts[key] = item
        self._prompts.move_to_end(key)
        while len(self._prompts) > PROMPTS_IN_MEMORY:
            self._prompts.popitem(last=False)


def _names(store: VoiceBackend) -> Names:
    """The saved names with the marker they are current for: read before and after them, and unchanged in
    between (a commit under way or rolled back moves it; ``speakwire.voices.changes``). Blocking."""
    before = store.change_marker()
    keys = store.name_keys()
    return (before if before == store.change_marker() else None), keys


def cannot_clone_message(name: str, info: EngineInfo) -> str:
    builtin = f" or use a built-in voice ({', '.join(info.voices)})" if info.voices else ""
    return (
        f"Voice '{name}' is a saved (cloned) voice, and the {info.name} engine ({info.model}) cannot clone voices. "
        "Use it on a server running a Qwen3-TTS Base model (--engine qwen3 --model "
        f"Qwen/Qwen3-TTS-12Hz-1.7B-Base){builtin}."
    )


def _encode(engine: Engine, audio: AudioChunk, ref_text: str | None) -> Any:
    """The engine's clone prompt of a reference (Qwen3: ``extra["voice_clone_prompt"]`` after ``prepare``)."""
    request = SynthesisRequest(
        task_type="Base", ref_audio=audio, ref_text=ref_text, x_vector_only_mode=ref_text is None
    )
    return engine.prepare(engine.validate(request)).extra["voice_clone_prompt"]


async def _on_engine(scheduler: Scheduler, work: Callable[[], T]) -> T:
    """Run blocking engine work on the engine's scheduler (due now, like a first segment) and await it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return  # the awaiting request was cancelled meanwhile
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    job = scheduler.submit(run)
    try:
        return await future
    except asyncio.CancelledError:
        job.cancel()
        raise
