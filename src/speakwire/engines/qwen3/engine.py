"""Qwen3-TTS behind the Engine interface: every utterance is a row of one batched generation loop.

``generation_loop`` advances all active utterances one codec frame per step on a
thread that owns the device (``batched_talker`` over per-slot KV buffers), so a
second listener shares the GPU with the first instead of waiting for it. This
module turns a row's frames into audio: they are decoded incrementally
(``stream_decoder``), batched across streams (``decode_batcher``), in a growing schedule — 2, 4, 8, 16, then 25
frames per chunk — so the first audio leaves after two frames (160 ms of audio),
and the streamed waveform equals the full decode of the same codes.

Text can keep arriving while a row generates (``open_text_stream``): one
generation per utterance, one voice, no per-sentence restarts. ``synthesize``
is the one-segment form of the same thing.

A gone client costs at most one more frame step: ``SynthesisRequest.cancelled``
and closing the generator both cancel the row, which frees its slot before the
loop's next step. A runaway utterance (no EOS) is stopped at a budget from the
text length (``frame_budget``) and reported in ``request.extra["capped"]``.

``synthesize_full`` runs the package's own ``generate_*`` (same prompts, same
sampling, same seed) as the reference the tests and benchmarks compare against.
"""

from __future__ import annotations

import gc
import itertools
import logging
import math
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import EngineInfo, SynthesisRequest
from speakwire.engines.qwen3.batched_talker import BatchedTalker
from speakwire.engines.qwen3.compat import import_qwen_tts
from speakwire.engines.qwen3.decode_batcher import DecodeBatcher
from speakwire.engines.qwen3.device import (
    apply_memory_fraction,
    memory_fraction,
    resolve_device,
    resolve_dtype,
)
from speakwire.engines.qwen3.frame_budget import frame_budget
from speakwire.engines.qwen3.frame_tap import FrameTap, GenerationSession, GenerationStopped
from speakwire.engines.qwen3.generation_loop import GenerationLoop, Row
from speakwire.engines.qwen3.kv_slots import SlotKVCache
from speakwire.engines.qwen3.memory_plan import decode_free_bytes, plan_memory
from speakwire.engines.qwen3.prompt_cache import PromptCache, prompt_key
from speakwire.engines.qwen3.sampling import RowSampling
from speakwire.engines.qwen3.stream_decoder import StreamDecoder
from speakwire.engines.qwen3.talker_prompt import PromptBuilder, VoiceSpec
from speakwire.engines.qwen3.text_stream import Qwen3TextStream
from speakwire.engines.qwen3.validation import TASK_BY_VARIANT, Qwen3ModelFacts, validate_request
from speakwire.languages import QWEN3_LANGUAGES

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
DEFAULT_STREAM_SCHEDULE = (2, 4, 8, 16, 25)
"""Frames per chunk on CPU, where one more decode call costs about as much as a frame step."""
GPU_STREAM_SCHEDULE = (1, 2, 4, 8, 16, 25)
"""On a GPU the first chunk is one frame (80 ms of audio): first audio one frame step after the prompt."""
LANGUAGE_ORDER = QWEN3_LANGUAGES
DEFAULT_SPEAKER = "Vivian"
"""vLLM-Omni's default CustomVoice speaker; listed first (= our default) when the checkpoint has it."""


class Qwen3Engine:
    """A Qwen3-TTS checkpoint (Base, CustomVoice or VoiceDesign), loaded by ``load_qwen3_engine``."""

    def __init__(
        self,
        tts: Any,
        *,
        model: str,
        device: str,
        dtype: str,
        stream_schedule: Sequence[int] = DEFAULT_STREAM_SCHEDULE,
        prompt_cache_size: int = 64,
        max_batch: int | None = None,
        max_len: int | None = None,
        memory_share: float | None = None,
        prefill_chunk: int = 256,
        decode_batch: int | None = None,
    ) -> None:
        import torch

        if not stream_schedule or any(int(size) < 1 for size in stream_schedule):
            raise ValueError(f"stream_schedule must be positive frame counts, got {tuple(stream_schedule)}")
        self._torch = torch
        self._tts = tts
        self._shares_cpu_threads = False
        """Set by ``load_qwen3_engine`` on CPU: ``close`` lets go of the intra-op threads (``_share_cpu_threads``)."""
        config = tts.model.config
        self.variant: str = config.tts_model_type
        self.model_size: str = _size_label(config.tts_model_size)
        self._facts = Qwen3ModelFacts(
            model=model,
            task_type=TASK_BY_VARIANT[self.variant],
            speakers=_speakers(tts.model.get_supported_speakers()),
            languages=_languages(tts.model.get_supported_languages()),
            # Mirrors the package, which drops `instruct` when `tts_model_size in "0b6"`.
            honours_instructions=self.variant == "voice_design"
            or (self.variant == "custom_voice" and config.tts_model_size not in "0b6"),
        )
        self.memory = plan_memory(
            torch,
            tts,
            device=device,
            dtype=tts.model.talker.dtype,
            max_batch=max_batch,
            max_len=max_len,
            memory_share=memory_share,
        )
        self._info = EngineInfo(
            name="qwen3",
            model=model,
            sample_rate=SAMPLE_RATE,
            voices=self._facts.speakers,
            languages=self._facts.languages,
            supports_cloning=self.variant == "base",
            supports_instructions=self._facts.honours_instructions,
            supports_speed=False,
            task_types=(self._facts.task_type,),
            needs_text_normalization=False,
            max_concurrent=self.memory.slots,
            streams_text=True,
            extra={"variant": self.variant, "size": self.model_size, "device": device, "dtype": dtype},
        )
        self.stream_schedule = tuple(int(size) for size in stream_schedule)
        self.prompt_cache: PromptCache[Any] = PromptCache(prompt_cache_size)
        self.prompt_encodes = 0
        """Clone prompts actually encoded (cache misses that ran the encoders)."""
        self._decoder = tts.model.speech_tokenizer.model.decoder
        self._samples_per_frame = int(self._decoder.total_upsample)
        self._eos = int(config.talker_config.codec_eos_token_id)
        talker_generation = tts.model.talker.generation_config
        if talker_generation.pad_token_id is None:
            # What HF falls back to anyway, stated once so it stops logging "Setting pad_token_id" per utterance.
            talker_generation.pad_token_id = self._eos
        cache = SlotKVCache(
            torch,
            tts.model.talker.config,
            slots=self.memory.slots,
            max_len=self.memory.max_len,
            dtype=tts.model.talker.dtype,
            device=tts.model.talker.device,
        )
        self.loop = GenerationLoop(tts, BatchedTalker(tts, cache), PromptBuilder(tts), prefill_chunk=prefill_chunk)
        self.decoding = DecodeBatcher(self._decoder, max_windows=decode_batch)
        self.loop.on_chunk_ends = self.decoding.expect  # a step's chunks decode in one call
        self._decode_batch_set = decode_batch is not None
        self._tap = FrameTap(tts)
        self._generating = threading.Lock()
        """Serialises the package's own generate (``synthesize_full``): it keeps per-call state on the module."""

    @property
    def info(self) -> EngineInfo:
        return self._info

    def fit_decode_batch(self, memory_share: float | None = None) -> int:
        """CUDA: cap code2wav's batch by memory (one window's measured peak, ``decode_free_bytes``); logged.

        Windows are at most history + the schedule's largest chunk long, and at most one per slot is due
        at once. Kept as it is when the engine was given ``decode_batch``, and on CPU."""
        if self._decode_batch_set or self.decoding.stream is None:
            return self.decoding.max_windows
        free = decode_free_bytes(self._torch, str(self._decoder.device), memory_share)
        return self.decoding.fit_to_memory(free, frames=max(self.stream_schedule), ceiling=self.memory.slots)

    @property
    def tts_model(self) -> Any:
        """The underlying ``qwen_tts.Qwen3TTSModel`` (for benchmarks and tests)."""
        return self._tts

    def validate(self, request: SynthesisRequest) -> SynthesisRequest:
        """Check ``request`` against this checkpoint (see ``validation``); fix a seed for the whole request.

        A request without a seed gets a random one here, so every segment of it is sampled from the same
        seed: a VoiceDesign voice, which is sampled, then stays the same voice from sentence to sentence.
        """
        validate_request(request, self._facts)
        if request.seed is None:
            request.seed = secrets.randbelow(2**31)
        return request

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Build (or fetch from the cache) the voice-clone prompt of a Base request.

        The prompt item lands in ``request.extra["voice_clone_prompt"]``.
        """
        if request.task_type == "Base" and "voice_clone_prompt" not in request.extra:
            request.extra["voice_clone_prompt"] = self._clone_prompt(request)
        return request

    def synthesize(self, text: str, request: SynthesisRequest) -> Iterator[AudioChunk]:
        """Stream one segment: chunks of ``stream_schedule`` frames (1920 samples each) at 24 kHz."""
        request = self.prepare(self.validate(request))
        if request.cancelled.is_set():
            return
        stream = self.open_text_stream(request)
        stream.feed(text)
        stream.finish()
        for chunk, _ in stream.chunks():
            yield chunk

    def open_text_stream(self, request: SynthesisRequest) -> Qwen3TextStream:
        """One utterance whose text may still be arriving: ``feed``/``finish`` text, iterate ``chunks``.

        ``request`` must be validated and prepared. Its frame budget follows the text received so far; a
        long text rolls over to a new generation at a sentence end (``text_stream``).
        """
        return Qwen3TextStream(self, request)

    def open_row(self, request: SynthesisRequest, *, chunks: Sequence[int] | None = None, stream: object = None) -> Row:
        """The request as a row of the generation loop: codec frames out, no decoding (tests, benchmarks).

        ``chunks``: the frames per code2wav chunk the caller decodes in (``stream_schedule``); the loop then
        marks where each chunk ends, in step with other streams' rows (``Frame.chunk_end``). ``stream``: the
        utterance the row is part of (``Qwen3TextStream``)."""
        return self.loop.submit(
            self._voice(request), self._sampling(request), seed=int(request.seed or 0),
            max_new_tokens=request.max_new_tokens, chunks=chunks, stream=stream,
        )  # fmt: skip

    @property
    def health_error(self) -> str | None:
        """Why the engine can no longer serve (repeated failed generation steps), or None; /ready and /ping 503."""
        return self.loop.health_error

    def engine_metrics(self) -> dict[str, float]:
        """For /metrics: KV slots and their use, the loop's steps and batch, code2wav batching."""
        stats, decoding = self.loop.stats, self.decoding.stats
        return {
            "slots": self.loop.slots,
            "slots_in_use": self.loop.slots - self.loop.free_slots,
            "steps_total": stats.steps,
            "step_rows_total": stats.rows_stepped,
            "step_seconds_total": stats.step_s,
            "prefills_total": stats.prefills,
            "code2wav_calls_total": decoding.calls,
            "code2wav_chunks_total": decoding.chunks,
        }

    def synthesize_full(self, text: str, request: SynthesisRequest) -> AudioChunk:
        """The whole segment from the package's own ``generate_*`` (non-streaming; tests and benchmarks).

        Same prompts (streaming text mode), frame budget, sampling and seed as ``synthesize``, so for
        the same request the two give the same audio.
        """
        request = self.prepare(self.validate(request))
        budget = frame_budget(text, request.max_new_tokens)
        session = GenerationSession(max_frames=budget, stop_at_cap=False, cancelled=(request.cancelled,))
        try:
            with self._turn(session):
                self._torch.manual_seed(int(request.seed or 0))
                with self._tap.attach(session):
                    wavs, rate = self._generate(text, request, max_new_tokens=budget + 2)
        except GenerationStopped:
            return AudioChunk(np.zeros(0, dtype=np.float32), SAMPLE_RATE)
        # max_new_tokens = budget + 2 lets a runaway make one frame past the budget (that is how it is
        # told from an utterance that ends exactly at the budget); the decoder is causal, so cutting keeps
        # the first `budget` frames exactly as streamed.
        samples = np.asarray(wavs[0], dtype=np.float32)[: budget * self._samples_per_frame]
        if session.capped:
            self.report_cap(request, budget, text)
        return AudioChunk(np.ascontiguousarray(samples), int(rate))

    def close(self) -> None:
        """Stop the generation loop and release the model (and its GPU memory)."""
        if self._tts is None:
            return
        self.loop.close()
        self.decoding.close()
        with self._generating:
            self._tap.remove()
            self._tts = None
            self._decoder = None
            self.prompt_cache.clear()
        if self._shares_cpu_threads:
            self._shares_cpu_threads = False
            _release_cpu_threads(self._torch)
        gc.collect()
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()

    # -- rows ----------------------------------------------------------------------------------

    def _voice(self, request: SynthesisRequest) -> VoiceSpec:
        task = request.task_type or self._facts.task_type
        return VoiceSpec(
            task_type=task,
            language=request.language,
            speaker=request.voice if task == "CustomVoice" else None,
            instructions=request.instructions,
            clone=request.extra.get("voice_clone_prompt") if task == "Base" else None,
        )

    def _sampling(self, request: SynthesisRequest) -> RowSampling:
        override = request.extra.get("sampling")
        if isinstance(override, RowSampling):
            return override
        return RowSampling.from_defaults(self._tts.generate_defaults, greedy=bool(request.extra.get("greedy")))

    def _generate(self, text: str, request: SynthesisRequest, *, max_new_tokens: int) -> Any:
        """One call of the package's own generate method for the request's task, in streaming text mode."""
        tts = self._tts
        kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "non_streaming_mode": False}
        if request.extra.get("greedy"):
            kwargs.update(do_sample=False, subtalker_dosample=False)
        if request.task_type == "CustomVoice":
            return tts.generate_custom_voice(
                text=text, speaker=request.voice, language=request.language, instruct=request.instructions, **kwargs
            )
        if request.task_type == "VoiceDesign":
            return tts.generate_voice_design(
                text=text, instruct=request.instructions, language=request.language, **kwargs
            )
        return tts.generate_voice_clone(
            text=text, language=request.language, voice_clone_prompt=[request.extra["voice_clone_prompt"]], **kwargs
        )

    def _turn(self, session: GenerationSession) -> _Turn:
        return _Turn(self._generating, session)

    def open_decoder(self, request: SynthesisRequest) -> StreamDecoder:
        """A streaming code2wav for one row, primed with the reference's codes in ICL cloning."""
        return StreamDecoder(self._decoder, history=self._history(request))

    def report_cap(self, request: SynthesisRequest, budget: int, text: str) -> None:
        request.extra["capped"] = True
        logger.warning(
            "qwen3: utterance hit its frame budget (%d frames = %.1f s) without EOS and was cut: %.60r",
            budget,
            budget * self._samples_per_frame / SAMPLE_RATE,
            text,
        )

    # -- voice cloning -----------------------------------------------------------------------------

    def _history(self, request: SynthesisRequest) -> Any:
        """Codes the package decodes in front of the generated ones: the reference's, in ICL cloning."""
        prompt = request.extra.get("voice_clone_prompt")
        if prompt is None or not prompt.icl_mode or prompt.ref_code is None:
            return None
        return prompt.ref_code

    def _clone_prompt(self, request: SynthesisRequest) -> Any:
        audio = request.ref_audio
        if hasattr(audio, "ref_spk_embedding"):
            return audio  # already a VoiceClonePromptItem
        samples = np.asarray(audio.samples, dtype=np.float32)
        if audio.sample_rate != SAMPLE_RATE:
            import soxr

            samples = soxr.resample(samples, audio.sample_rate, SAMPLE_RATE).astype(np.float32)
        ref_text = None if request.x_vector_only_mode else request.ref_text
        key = prompt_key(samples, ref_text, request.x_vector_only_mode, self._info.model)
        return self.prompt_cache.get_or_create(
            key, lambda: self._encode_prompt(samples, ref_text, request.x_vector_only_mode)
        )

    def _encode_prompt(self, samples: Any, ref_text: str | None, x_vector_only_mode: bool) -> Any:
        started = time.perf_counter()
        items = self._tts.create_voice_clone_prompt(
            ref_audio=(samples, SAMPLE_RATE), ref_text=ref_text, x_vector_only_mode=x_vector_only_mode
        )
        self.prompt_encodes += 1
        logger.debug(
            "qwen3: encoded a %.1f s clone prompt in %.3f s",
            len(samples) / SAMPLE_RATE,
            time.perf_counter() - started,
        )
        return items[0]


class _Turn:
    """Holds the engine's generation lock, waiting for it in short steps so a cancel still gets through."""

    def __init__(self, lock: threading.Lock, session: GenerationSession) -> None:
        self._lock = lock
        self._session = session

    def __enter__(self) -> None:
        while not self._lock.acquire(timeout=0.05):
            self._session.before_step(decode_step=False)  # raises GenerationStopped once cancelled

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def load_qwen3_engine(
    model: str,
    *,
    device: str | None = None,
    dtype: str | None = None,
    gpu_memory_utilization: float | None = None,
    stream_schedule: tuple[int, ...] | None = None,
    prompt_cache_size: int = 64,
    max_batch: int | None = None,
    max_len: int | None = None,
    cuda_graphs: bool | None = None,
    decode_batch: int | None = None,
) -> Qwen3Engine:
    """Load a Qwen3-TTS 12 Hz checkpoint (hub id or local directory) as a streaming engine.

    Args:
        model: Hub id (e.g. ``Qwen/Qwen3-TTS-12Hz-0.6B-Base``) or a local directory; a directory is read
            with ``local_files_only`` and makes no network calls.
        device: ``"cuda"``, ``"cuda:1"``, ``"cpu"``; default CUDA when available.
        dtype: ``"bfloat16"``, ``"float16"``, ``"float32"``; default bfloat16 on CUDA, float32 on CPU.
        gpu_memory_utilization: Share of the GPU's memory this process may use, in (0, 1]; default
            ``$SM_VLLM_GPU_MEMORY_UTILIZATION``, else no cap.
        stream_schedule: Frames per streamed chunk; the last size repeats. Default ``GPU_STREAM_SCHEDULE`` on
            CUDA, else ``DEFAULT_STREAM_SCHEDULE``.
        prompt_cache_size: Voice-clone prompts kept (LRU); 0 disables the cache.
        max_batch: Most utterances generating at once (KV slots); default: what the memory budget allows,
            at most 64.
        max_len: Talker positions per utterance (prompt + frames); default 4096.
        cuda_graphs: On CUDA, capture the loop's static step (talker decode, code predictor, sampling) as
            one CUDA graph per batch bucket before returning (so before the server's warm-up and /ready);
            None (the default) = on for CUDA. A failed capture logs and leaves the step eager.
        decode_batch: Most windows in one code2wav call; default on CUDA: what the memory left after the
            loop holds (measured with one window's decode at load, logged), on CPU ``CPU_MAX_WINDOWS``.

    Raises:
        MissingExtraError: torch or qwen-tts is not installed.
    """
    qwen_tts = import_qwen_tts()
    import torch

    started = time.perf_counter()
    device = resolve_device(torch, device)
    torch_dtype = resolve_dtype(torch, dtype, device)
    share = memory_fraction(gpu_memory_utilization)
    apply_memory_fraction(torch, device, share)
    if device == "cpu":
        _share_cpu_threads(torch)
    try:
        kwargs: dict[str, Any] = {"dtype": torch_dtype, "device_map": device}
        if os.path.isdir(model):
            kwargs["local_files_only"] = True
        tts = qwen_tts.Qwen3TTSModel.from_pretrained(model, **kwargs)
        tts.model.eval()
        dtype_name = str(torch_dtype).removeprefix("torch.")
        default_schedule = GPU_STREAM_SCHEDULE if device.startswith("cuda") else DEFAULT_STREAM_SCHEDULE
        engine = Qwen3Engine(
            tts,
            model=model,
            device=device,
            dtype=dtype_name,
            stream_schedule=stream_schedule or default_schedule,
            prompt_cache_size=prompt_cache_size,
            max_batch=max_batch,
            max_len=max_len,
            memory_share=share,
            decode_batch=decode_batch,
        )
    except BaseException:
        if device == "cpu":
            _release_cpu_threads(torch)
        raise
    engine._shares_cpu_threads = device == "cpu"
    _log_loaded(engine, tts, device, dtype_name, time.perf_counter() - started)
    if cuda_graphs is not False and device.startswith("cuda"):
        try:
            with torch.inference_mode():
                engine.loop.capture_graphs()  # logs its time
        except Exception:
            logger.exception("qwen3: capturing the step as CUDA graphs failed; the step runs eagerly")
    if device.startswith("cuda"):
        try:
            engine.fit_decode_batch(share)  # after the graphs: their pools are part of what is taken
        except Exception:
            logger.exception("qwen3: measuring code2wav's memory failed; it batches at most %d windows",
                             engine.decoding.max_windows)  # fmt: skip
    return engine


_threads_lock = threading.Lock()
_cpu_engines = 0
"""CPU engines loaded and not yet closed (``_share_cpu_threads`` / ``_release_cpu_threads``)."""
_threads_before: int | None = None
"""Torch's intra-op threads before a CPU engine lowered them, until the last one closes."""


def _share_cpu_threads(torch: Any) -> None:
    """On CPU devices only (the caller checks): the generation loop and code2wav run ops at the same time, from
    two threads, each with its own team of intra-op threads; give each team half the usable cores
    (``usable_cores``), so the two do not oversubscribe them.

    With torch's default (one thread per core) both teams spin on OpenMP barriers while the other holds the
    cores; on 2 cores that about doubled the loop thread's CPU per step. ``torch.set_num_threads`` is
    process-wide, so this only ever lowers the count (it never raises what someone else chose), an explicit
    ``OMP_NUM_THREADS`` is left alone, and the count lowered goes back when the last CPU engine closes
    (``_release_cpu_threads``): the process that loaded an engine gets its threads back."""
    global _cpu_engines, _threads_before
    with _threads_lock:
        _cpu_engines += 1
        if "OMP_NUM_THREADS" in os.environ:
            return
        before = int(torch.get_num_threads())
        threads = min(before, max(1, usable_cores() // 2))
        if threads < before:
            torch.set_num_threads(threads)
            if _threads_before is None:
                _threads_before = before
            logger.info("qwen3: %d intra-op threads per CPU thread (the loop's and code2wav's)", threads)


def _release_cpu_threads(torch: Any) -> None:
    """One CPU engine closed (or failed to load); the last puts back the count ``_share_cpu_threads`` lowered.

    Unconditionally: with OpenMP, ``torch.get_num_threads`` answers for the calling thread once it has run
    torch, and the server loads on a worker thread but closes on the event loop's, which may still see the
    count from before the load; comparing with it skipped the restore."""
    global _cpu_engines, _threads_before
    with _threads_lock:
        _cpu_engines -= 1
        if _cpu_engines or _threads_before is None:
            return
        torch.set_num_threads(_threads_before)
        _threads_before = None


CGROUP_CPU_MAX = "/sys/fs/cgroup/cpu.max"
"""cgroup v2: the CPU quota of the container, ``"max 100000"`` (none) or ``"<quota> <period>"`` microseconds."""


def usable_cores(cpu_max: str = CGROUP_CPU_MAX) -> int:
    """The cores this process may run on: its CPU affinity (``os.cpu_count`` counts the machine's, which a
    pinned process or a container does not have), at most the cgroup v2 quota (rounded up), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cpu_max)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def cgroup_cpu_quota(path: str = CGROUP_CPU_MAX) -> float | None:
    """The cgroup v2 CPU quota in cores (``quota / period``), or None: no file, no quota (``max``), unreadable."""
    try:
        with open(path, encoding="ascii") as file:
            fields = file.read().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _log_loaded(engine: Qwen3Engine, tts: Any, device: str, dtype: str, seconds: float) -> None:
    stages = {
        "talker": tts.model.talker,
        "speaker encoder": tts.model.speaker_encoder,
        "code2wav (speech tokenizer)": tts.model.speech_tokenizer.model,
    }
    params = sum(p.numel() for stage in stages.values() if stage is not None for p in stage.parameters())
    weights = ", ".join(f"{name} {_mib(stage):.1f} MiB" for name, stage in stages.items() if stage is not None)
    logger.info(
        "qwen3: loaded %s — variant %s (task %s), size %s (%.1fM params), device %s, dtype %s; weights: %s; "
        "load %.2f s",
        engine.info.model,
        engine.variant,
        engine.info.task_types[0],
        engine.model_size,
        params / 1e6,
        device,
        dtype,
        weights,
        seconds,
    )
    logger.info("qwen3: %s", engine.memory.describe())


def _mib(module: Any) -> float:
    tensors = itertools.chain(module.parameters(), module.buffers())
    return float(sum(int(t.numel()) * int(t.element_size()) for t in tensors)) / 2**20


def _size_label(size: str) -> str:
    """``"0b6"`` → ``"0.6B"``, ``"1b7"`` → ``"1.7B"`` (as in the checkpoint names)."""
    return size.replace("b", ".").upper() + "B" if "b" in size else size


def _speakers(names: Any) -> tuple[str, ...]:
    canonical = [str(name).title() for name in (names or ())]  # "uncle_fu" → "Uncle_Fu"
    canonical.sort(key=lambda name: name != DEFAULT_SPEAKER)  # stable: keeps config order otherwise
    return tuple(canonical)


def _languages(names: Any) -> tuple[str, ...]:
    canonical = {str(name).title() for name in (names or ())} | {"Auto"}
    known = [name for name in LANGUAGE_ORDER if name in canonical]
    return tuple(known + sorted(canonical - set(known)))
