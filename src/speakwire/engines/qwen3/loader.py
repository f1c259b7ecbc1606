"""Loading a Qwen3-TTS checkpoint as a ``Qwen3Engine``: device and dtype, memory share, CPU threads, CUDA graphs."""

from __future__ import annotations

import itertools
import logging
import os
import time
from typing import Any

from speakwire.engines.qwen3.compat import import_qwen_tts
from speakwire.engines.qwen3.cpu_threads import release_cpu_threads, share_cpu_threads
from speakwire.engines.qwen3.device import apply_memory_fraction, memory_fraction, resolve_device, resolve_dtype
from speakwire.engines.qwen3.engine import DEFAULT_STREAM_SCHEDULE, GPU_STREAM_SCHEDULE, Qwen3Engine

logger = logging.getLogger(__name__)


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
            one CUDA graph per batch and span bucket before returning (so before the server's warm-up and /ready);
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
        share_cpu_threads(torch)
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
            release_cpu_threads(torch)
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
