"""ServerState: what every route needs — settings, the engine, the pipeline, readiness, metrics."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol

import numpy as np

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import Engine, EngineInfo, MonitoredEngine, SynthesisRequest
from speakwire.engines.registry import default_worker_count, load_engine
from speakwire.errors import NotReadyError
from speakwire.scheduler import Scheduler, WorkUsage
from speakwire.server import capacity as cap
from speakwire.server import gc_heap
from speakwire.server.live_capacity import LiveCapacity, WorkWindow
from speakwire.server.metrics import SpeechMetrics
from speakwire.server.voices.library import VoiceLibrary
from speakwire.settings import OPENAI_MODEL_ALIASES, Settings
from speakwire.synthesis import SynthesisPipeline
from speakwire.synthesis.aligning import AlignerThread
from speakwire.voice_presets import PRESET_VOICE_NAMES

logger = logging.getLogger(__name__)

_WARM_UP_TEXT = "Hello."


class GoingAway(Protocol):
    """An open WebSocket session, as the drain sees it (``server.drain``)."""

    async def going_away(self) -> None:
        """The drain is over and this session still open: send the protocol's final event saying why, close 1001.

        Never raises (the client may be gone); the session's own ``finally`` cancels what it still had running.
        """


@dataclass(slots=True)
class ServerState:
    settings: Settings
    engine: Engine | None = None
    pipeline: SynthesisPipeline | None = None
    metrics: SpeechMetrics | None = None
    voices: VoiceLibrary | None = None
    """Saved voices (``--data-dir``); open from startup, before and independent of the engine."""
    ready: bool = False
    capacity: LiveCapacity | None = None
    """Streams admitted and where that number comes from (measured live from the work the server runs, at
    warm-up, --max-streams, the engine): ``refresh_capacity`` keeps it current."""
    load_error: str | None = None
    failed_part: str | None = None
    """What ``load_error`` is about, for ``speakwire serve``'s last line ("the piper engine", "the aligner ...")."""
    started_at: float = field(default_factory=time.monotonic)
    _load_task: asyncio.Task[None] | None = None
    on_load_failure: Callable[[], None] | None = None
    """``speakwire serve`` stops the server here, so a process that cannot serve exits instead of answering 503."""
    _owns_engine: bool = False
    """The server loaded the engine itself (and closes it); an engine handed in belongs to the caller."""
    _froze_heap: bool = False
    """This server froze the start-up heap (``gc_heap``); its stop thaws it (a server whose load failed did not)."""
    ready_hooks: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    """Awaited once the engine is ready, before /ready turns 200 (the Wyoming listener binds here); one that
    raises fails the start like an engine that cannot load."""
    draining: bool = False
    """SIGTERM came: no new stream is admitted (503 / 1013), /ping and /ready answer 503 (``server.drain``)."""
    sessions: set[GoingAway] = field(default_factory=set)
    """The WebSocket sessions open now, closed with 1001 when a drain ends."""
    http_in_flight: int = 0
    """HTTP requests whose response has not sent its last part (``drain.InFlightMiddleware``): a drain waits
    for them as for the utterances in flight, so a whole file synthesized before the signal is sent whole."""
    _counted: tuple[int, WorkUsage] | None = field(default=None, init=False, repr=False, compare=False)
    """Underruns and the workers' usage (their audio made included) when ``refresh_capacity`` last read them
    (None: never)."""
    _voice_aliases: tuple[EngineInfo, Mapping[str, str]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    """``voice_aliases`` for the engine info it was built from: every request resolves its voice through it."""

    @property
    def engine_error(self) -> str | None:
        """Why a loaded engine says it can no longer serve (its ``health_error``, e.g. Qwen3's repeated failed
        steps), or None: /ready and /ping answer 503 with it."""
        engine = self.engine if self.ready else None
        return engine.health_error if isinstance(engine, MonitoredEngine) else None

    # ----- lifetime ---------------------------------------------------------------------

    async def start(self, engine: Engine | None = None) -> None:
        """Begin loading in the background so /health answers at once and /ready turns 200 after warm-up."""
        # The voice library opens first and in the foreground: it is quick (no files until a voice is saved),
        # and a library that cannot be read should stop the server rather than silently lose its voices.
        self.voices = await VoiceLibrary.open(self.settings)
        self._load_task = asyncio.create_task(self._load(engine))

    async def _load(self, engine: Engine | None) -> None:
        try:
            if engine is None:
                engine = await asyncio.to_thread(load_engine, self.settings)
                self._owns_engine = True
            self.engine = engine
            # A batched engine's job holds its worker for a whole utterance: no reserve for those.
            workers = default_worker_count(self.settings, engine.info)
            scheduler = Scheduler(workers, reserve=not engine.info.streams_text)
            self.metrics = SpeechMetrics(engine.info.name)
            self.metrics.watch_engine(engine)
            scheduler.queue_wait_observer = self.metrics.queue_wait.labels(engine=engine.info.name).observe
            aligner = await asyncio.to_thread(self._load_aligner, engine.info)
            explicit = self.settings.aligner.strip().lower() != "auto"
            self.pipeline = SynthesisPipeline(
                engine, scheduler, max_streams=self.settings.max_streams or cap.DEFAULT_STREAMS,
                max_queue=self.settings.max_queue, max_lead_s=self.settings.max_lead_s,
                trim_leading_silence=self.settings.trim_leading_silence, aligner=aligner,
                engine_words=not explicit,
            )  # fmt: skip
            warm_up_s = 0.0
            measured: tuple[float, float] | None = None
            if self.settings.warmup:
                started = time.perf_counter()
                clip = await asyncio.to_thread(self._warm_up, engine)
                if aligner is not None:
                    await asyncio.to_thread(self._measure_aligner, aligner, clip)
                if cap.can_measure(engine):
                    measured = await asyncio.to_thread(cap.measure_throughput, engine, scheduler.workers)
                warm_up_s = time.perf_counter() - started
            start = cap.derive(
                operator_limit=self.settings.max_streams, engine_limit=engine.info.max_concurrent,
                workers=scheduler.workers, measured=measured,
            )  # fmt: skip
            self.capacity = LiveCapacity(start, admission=self.settings.admission)
            if cap.can_measure(engine):
                self._counted = (self.metrics.underruns_heard, scheduler.usage())
            self.pipeline.max_streams = max_streams = self.capacity.streams
            self.metrics.watch_capacity(self.capacity, self.pipeline)
            for hook in self.ready_hooks:
                await hook()
            gc_heap.freeze_startup_heap()  # last before ready: what start-up made is never garbage
            self._froze_heap = True
            self.ready = True
            logger.info(
                "ready: engine %s, model %s (also answers to %s), %d worker(s), %d stream(s) at once (%s%s), "
                "%d Hz native; warm-up %.2f s",
                engine.info.name, engine.info.model,
                ", ".join(name for name in [*self.served_models(engine.info)[1:], *self.model_aliases()]),
                scheduler.workers, max_streams, f"{self.capacity.source}, admission {self.capacity.admission}",
                "" if measured is None else f", {measured[0]:.1f}x real time with every worker busy",
                engine.info.sample_rate, warm_up_s,
            )  # fmt: skip
        except Exception as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            if self.failed_part is None:
                self.failed_part = f"the {self.settings.engine} engine"
            logger.exception("%s failed to load", self.failed_part)
            if self.on_load_failure is not None:
                logger.critical(
                    "speakwire cannot serve: %s (%s) failed to load: %s — stopping.",
                    self.failed_part, self.settings.model or "default voice", self.load_error,
                )  # fmt: skip
                self.on_load_failure()

    def _load_aligner(self, info: EngineInfo) -> AlignerThread | None:
        """The aligner ``--aligner`` asks for (``auto``: only where the engine has no timings of its own)."""
        from speakwire.aligners.base import AlignerOptions
        from speakwire.aligners.registry import AUTO, canonical_name, load_aligner, resolve_auto

        settings = self.settings
        name = settings.aligner.strip()
        explicit = name.lower() != AUTO
        if not explicit:
            language = "English" if "English" in info.languages else (info.languages or (None,))[0]
            name = resolve_auto(engine_has_timings=bool(info.extra.get("word_timings")), language=language)
        options = AlignerOptions(device=settings.device, dtype=settings.dtype, download=settings.aligner_download)
        try:
            aligner = load_aligner(canonical_name(name), options)
        except Exception:
            self.failed_part = f"the aligner {name!r}"
            raise
        if aligner is None:
            own = not explicit and info.extra.get("word_timings")
            logger.info("word timings: %s", "the engine's own" if own else "none")
            return None
        return AlignerThread(aligner, timeout_s=settings.aligner_timeout_s)

    @staticmethod
    def _measure_aligner(aligner: AlignerThread, clip: AudioChunk | None) -> None:
        """Log what aligning costs per second of audio, on the warm-up's own audio (best of three).

        Through the aligner's own thread and bound, so an aligner that hangs on the clip delays readiness by one
        bound, not forever (and the sentences after it go without words until the call returns).
        """
        if clip is None or not len(clip.samples):
            return
        audio_s = len(clip.samples) / clip.sample_rate
        bound_s = aligner.deadline_s(audio_s)
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            future = aligner.submit(clip.samples, clip.sample_rate, _WARM_UP_TEXT)
            try:
                future.result(timeout=bound_s)
            except TimeoutError:
                aligner.expired(future, counted=False)  # not a client's sentence: not in the metric
                logger.warning("word timings: aligner %s did not align the %.2f s warm-up clip within %.1f s",
                               aligner.aligner.name, audio_s, bound_s)  # fmt: skip
                return
            best = min(best, time.perf_counter() - started)
        logger.info(
            "word timings: aligner %s, %.3f s per audio second (best of 3 on the %.2f s warm-up clip)",
            aligner.aligner.name, best / audio_s, audio_s,
        )  # fmt: skip

    @staticmethod
    def _warm_up(engine: Engine) -> AudioChunk | None:
        """One real synthesis, so the first client does not pay for lazy initialisation; its audio."""
        info = engine.info
        request = SynthesisRequest()
        if "Base" in info.task_types:
            # Cloning models need a reference: two seconds of a quiet tone, speaker embedding only.
            tone = 0.1 * np.sin(2 * np.pi * 220 * np.arange(2 * 24000) / 24000)
            request = replace(request, ref_audio=AudioChunk(tone.astype(np.float32), 24000), x_vector_only_mode=True)
        if "VoiceDesign" in info.task_types:
            request = replace(request, instructions="A calm, clear voice.")
        request = engine.prepare(engine.validate(request))
        chunks = [chunk for chunk in engine.synthesize(_WARM_UP_TEXT, request)]
        if not chunks:
            return None
        return AudioChunk(np.concatenate([chunk.samples for chunk in chunks]), chunks[0].sample_rate)

    async def stop(self) -> None:
        if self._load_task is not None and not self._load_task.done():
            self._load_task.cancel()
        if self.pipeline is not None:
            await asyncio.to_thread(self.pipeline.scheduler.close)
            await asyncio.to_thread(self.pipeline.close)
        if self._froze_heap:  # the engine's objects are collectable again once it is released
            self._froze_heap = False
            gc_heap.thaw()
        if self.engine is not None and self._owns_engine:
            self.engine.close()
        if self.voices is not None:
            await self.voices.close()

    # ----- helpers for routes -----------------------------------------------------------

    def refresh_capacity(self) -> None:
        """Hand the live capacity estimate the work done since the last call, and admit by its limit.

        Called on the event loop before each admission and by ``/ready`` and ``/metrics``, so the limit is
        current when it decides and what the probes show is what admission uses. Engines whose work does not
        run on the scheduler's workers (a batched engine's own loop) are not measured.
        """
        counted, capacity, metrics, pipeline = self._counted, self.capacity, self.metrics, self.pipeline
        if counted is None or capacity is None or metrics is None or pipeline is None:
            return
        underruns, usage = metrics.underruns_heard, pipeline.scheduler.usage()
        self._counted = (underruns, usage)
        work = usage.since(counted[1])
        capacity.observe(WorkWindow(work, underruns - counted[0]))
        pipeline.max_streams = capacity.streams  # every time, so admission never acts on a stale limit

    @contextmanager
    def open_session(self, session: GoingAway) -> Iterator[None]:
        """Around an accepted WebSocket session's life, so a drain can close it with 1001 when it ends."""
        self.sessions.add(session)
        try:
            yield
        finally:
            self.sessions.discard(session)

    def require_ready(self) -> tuple[Engine, SynthesisPipeline, SpeechMetrics]:
        if self.load_error:
            raise NotReadyError(f"Engine failed to load: {self.load_error}")
        if not self.ready or self.engine is None or self.pipeline is None or self.metrics is None:
            raise NotReadyError("Engine is still loading; retry shortly (GET /ready turns 200 when it is ready).")
        return self.engine, self.pipeline, self.metrics

    def served_models(self, info: EngineInfo) -> list[str]:
        names = [info.model]
        if self.settings.model and self.settings.model not in names:
            names.append(self.settings.model)
        return names

    def model_aliases(self) -> dict[str, str]:
        aliases = {name: "" for name in OPENAI_MODEL_ALIASES}
        aliases.update({"speakwire": ""})
        aliases.update(self.settings.model_aliases)
        return aliases

    def voice_aliases(self, info: EngineInfo) -> Mapping[str, str]:
        """Lower-cased voice names → one of this engine's voices.

        The voice names stock clients send by default (OpenAI's, Qwen3's preset speakers, ElevenLabs',
        Cartesia's and Deepgram's: ``speakwire.voice_presets``) mean the default voice on an engine that
        has no voice of that name (``--no-preset-voice-aliases`` turns this off); ``--voice-alias`` entries
        are added on top. A preset alias never hides a voice the engine really has. Built once per engine info
        (the settings do not change while serving), read-only.
        """
        cached = self._voice_aliases
        if cached is not None and cached[0] is info:
            return cached[1]
        aliases: dict[str, str] = {}
        if info.voices and self.settings.preset_voice_aliases:
            own = {voice.lower() for voice in info.voices}
            for name in PRESET_VOICE_NAMES:
                if name.lower() not in own:
                    aliases[name.lower()] = info.default_voice
        aliases.update({k.lower(): v for k, v in self.settings.voice_aliases.items()})
        table = MappingProxyType(aliases)
        self._voice_aliases = (info, table)
        return table
