"""Qwen3-TTS behind the Engine interface: every utterance is a row of one batched generation loop.

``generation_loop`` advances all active utterances one codec frame per step on a
thread that owns the device (``batched_talker`` over per-slot KV buffers), so a
second listener shares the GPU with the first instead of waiting for it. This
module turns a row's frames into audio: they are decoded incrementally
(``stream_decoder``), batched across streams (``decode_batcher``), in a growing schedule — 2, 4, 8, 16, then 25
frames per chunk — so the first audio leaves after two frames (160 ms of audio),
and the streamed waveform equals the full decode of the same codes.

Text can keep arriving while a row generates (``open_audio_stream``): one
generation per utterance, one voice, no per-sentence restarts; the loop and
code2wav push its audio to a listener, with no thread of the utterance's own.
``open_text_stream`` is the same as a blocking iterator, and ``synthesize`` the
one-segment form of that.

A gone client costs at most one more frame step: ``SynthesisRun.cancelled``
and closing the generator both cancel the row, which frees its slot before the
loop's next step. A runaway utterance (no EOS) is stopped at a budget from the
text length (``frame_budget``) and reported in ``SynthesisRun.result.capped``.

Loading (``loader.load_qwen3_engine``) and the process's CPU threads (``cpu_threads``) live apart.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import secrets
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from speakwire.audio.chunk import AudioChunk
from speakwire.engines.base import EngineInfo, SynthesisRequest, SynthesisRun
from speakwire.engines.qwen3.batched_talker import BatchedTalker
from speakwire.engines.qwen3.cpu_threads import release_cpu_threads
from speakwire.engines.qwen3.decode_batcher import DecodeBatcher
from speakwire.engines.qwen3.generation_loop import GenerationLoop, Row, RowOutput
from speakwire.engines.qwen3.kv_slots import SlotKVCache
from speakwire.engines.qwen3.memory_plan import decode_free_bytes, plan_memory
from speakwire.engines.qwen3.prompt_cache import PromptCache, prompt_key
from speakwire.engines.qwen3.sampling import RowSampling
from speakwire.engines.qwen3.stream_decoder import StreamDecoder
from speakwire.engines.qwen3.talker_prompt import PromptBuilder, VoiceSpec
from speakwire.engines.qwen3.text_stream import AudioListener, Qwen3TextStream
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
    """A Qwen3-TTS checkpoint (Base, CustomVoice or VoiceDesign), loaded by ``loader.load_qwen3_engine``."""

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
        """Set by ``load_qwen3_engine`` on CPU: ``close`` lets go of the intra-op threads (``cpu_threads``)."""
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
            supports_first_chunk_frames=True,
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
        self.decoding = DecodeBatcher(self._decoder, max_windows=decode_batch)
        self.loop = GenerationLoop(
            tts, BatchedTalker(tts, cache), PromptBuilder(tts), prefill_chunk=prefill_chunk, decoding=self.decoding
        )
        self._decode_batch_set = decode_batch is not None

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
        request = validate_request(request, self._facts)
        if request.seed is None:
            request = dataclasses.replace(request, seed=secrets.randbelow(2**31))
        return request

    def prepare(self, request: SynthesisRequest) -> SynthesisRequest:
        """Build (or fetch from the cache) the voice-clone prompt of a Base request.

        The prompt item is in the returned copy's ``extra["voice_clone_prompt"]``.
        """
        if request.task_type == "Base" and "voice_clone_prompt" not in request.extra:
            extra = {**request.extra, "voice_clone_prompt": self._clone_prompt(request)}
            return dataclasses.replace(request, extra=extra)
        return request

    def synthesize(self, text: str, request: SynthesisRequest, run: SynthesisRun | None = None) -> Iterator[AudioChunk]:
        """Stream one segment: chunks of ``stream_schedule`` frames (1920 samples each) at 24 kHz."""
        request = self.prepare(self.validate(request))
        run = run if run is not None else SynthesisRun()
        if run.cancelled.is_set():
            return
        stream = self.open_text_stream(request, run)
        stream.feed(text)
        stream.finish()
        for chunk, _ in stream.chunks():
            yield chunk

    def open_audio_stream(
        self, request: SynthesisRequest, run: SynthesisRun, listener: AudioListener
    ) -> Qwen3TextStream:
        """One utterance whose text may still be arriving: ``feed``/``finish`` text (from any one thread); its
        audio goes to ``listener`` from the loop's and code2wav's threads, which never wait for it
        (``hold``/``release`` make its rows sit out).

        ``request`` must be validated and prepared. Its frame budget follows the text received so far; a
        long text rolls over to a new generation at a sentence end (``text_stream``). ``run``: cancelling
        stops its rows; a cap is reported in ``run.result``.
        """
        return Qwen3TextStream(self, request, run, listener)

    def open_text_stream(self, request: SynthesisRequest, run: SynthesisRun | None = None) -> Qwen3TextStream:
        """``open_audio_stream`` read as a blocking iterator: ``feed``/``finish`` text, iterate ``chunks``."""
        return Qwen3TextStream(self, request, run if run is not None else SynthesisRun())

    def open_row(
        self,
        request: SynthesisRequest,
        run: SynthesisRun | None = None,
        *,
        chunks: Sequence[int] | None = None,
        stream: object = None,
        output: RowOutput | None = None,
    ) -> Row:
        """The request as a row of the generation loop (cancelled with ``run.cancelled``; None: never).

        Without ``output``, codec frames out and no decoding (tests, benchmarks): ``chunks``, the frames per
        code2wav chunk a caller would decode in, only marks where each chunk ends, in step with other streams'
        rows (``Frame.chunk_end``). With ``output`` the loop decodes the row's chunks and hands their audio
        there. ``stream``: the utterance the row is part of (``Qwen3TextStream``)."""
        decoder = self.open_decoder(request) if output is not None else None
        return self.loop.submit(
            self._voice(request), self._sampling(request), seed=int(request.seed or 0),
            max_new_tokens=request.max_new_tokens, chunks=chunks, stream=stream, output=output, decoder=decoder,
            cancel_event=run.cancelled if run is not None else None,
        )  # fmt: skip

    @property
    def health_error(self) -> str | None:
        """Why the engine can no longer serve (repeated failed generation steps), or None; /ready and /ping 503."""
        return self.loop.health_error

    def engine_metrics(self) -> dict[str, float]:
        """For /metrics: KV slots and their use, the loop's steps and batch, code2wav batching, the loop's turns
        (wake-ups), the median recent step and the 99th percentile gap between consecutive step starts."""
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
            "loop_turns_total": stats.turns,
            **stats.step_percentiles(),
        }

    def close(self) -> None:
        """Stop the generation loop and release the model (and its GPU memory)."""
        if self._tts is None:
            return
        self.loop.close()
        self.decoding.close()
        self._tts = None
        self._decoder = None
        self.prompt_cache.clear()
        if self._shares_cpu_threads:
            self._shares_cpu_threads = False
            release_cpu_threads(self._torch)
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

    def open_decoder(self, request: SynthesisRequest) -> StreamDecoder:
        """A streaming code2wav for one row, primed with the reference's codes in ICL cloning."""
        return StreamDecoder(self._decoder, history=self._history(request))

    def report_cap(self, run: SynthesisRun, budget: int, text: str) -> None:
        run.result.capped = True
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
