"""Server settings: one dataclass, filled from CLI flags and ``SPEAKWIRE_*`` environment variables."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

# Re-exported: the voice names live with the other vendors' preset ids.
from speakwire.voice_presets import OPENAI_VOICE_ALIASES as OPENAI_VOICE_ALIASES
from speakwire.voice_presets import PRESET_SPEAKER_ALIASES as PRESET_SPEAKER_ALIASES

# OpenAI's model names are aliases of whatever this server serves by default, and its voice names (with every
# other vendor's stock default voice ids, speakwire.voice_presets) of its default voice, so drop-in clients
# work unchanged. Override with --model-alias / --voice-alias.
OPENAI_MODEL_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")


MAX_SEED = 2**32 - 1
"""Largest ``default_seed``: 32 bits, which every seeded sampler accepts (Qwen3's torch generators take 64,
and it adds each segment's index to the seed)."""


def _flag(raw: str) -> bool:
    return raw.strip().lower() in ("1", "true", "yes", "on")


Admission = Literal["live", "fixed"]
"""How the stream limit is set (``server.live_capacity``): ``live`` follows the measured capacity, ``fixed`` keeps
the warm-up's."""
ADMISSION_MODES: tuple[Admission, ...] = ("live", "fixed")


def parse_admission(raw: str) -> Admission:
    """An ``--admission`` / ``SPEAKWIRE_ADMISSION`` value: ``live`` or ``fixed``; ValueError says why not."""
    value = raw.strip().lower()
    if value == "live":
        return "live"
    if value == "fixed":
        return "fixed"
    raise ValueError(f"admission must be one of {', '.join(ADMISSION_MODES)}, not {raw!r}")


def parse_seed(raw: str) -> int:
    """A ``--seed`` / ``SPEAKWIRE_SEED`` value: an integer from 0 to ``MAX_SEED``; ValueError says why not."""
    try:
        seed = int(raw.strip())
    except ValueError:
        raise ValueError(f"the seed must be an integer from 0 to {MAX_SEED}, got {raw!r}") from None
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"the seed must be an integer from 0 to {MAX_SEED}, got {seed}")
    return seed


@dataclass(slots=True)
class Settings:
    """Everything a running server needs to know; the CLI builds one, tests build their own."""

    host: str = "127.0.0.1"
    port: int = 8000
    engine: str = "piper"
    """Engine name: ``piper`` (embedded voice) or ``qwen3``."""
    model: str | None = None
    """Qwen3 model dir or hub id; for Piper an optional ``.onnx`` voice path (None = embedded voice)."""
    device: str | None = None
    dtype: str | None = None
    gpu_memory_utilization: float | None = None
    max_batch: int | None = None
    """Qwen3: most utterances generating at once (KV slots); None = what the memory budget allows, ≤ 64."""
    cuda_graphs: bool | None = None
    """Qwen3 on CUDA: capture the whole loop step (talker decode, code predictor, sampling) per batch and span bucket as
    one CUDA graph each at load. None = on wherever the device is CUDA (the eager step's codes at the same spans);
    False = eager (``--no-cuda-graphs``). No effect on CPU, where the same static step runs eagerly."""
    api_key: str | None = None
    insecure: bool = False
    """Allow binding a non-loopback host without an API key."""
    public_metrics: bool = False
    """With an API key: leave /metrics and the API docs open (the probes are always open)."""
    max_input_chars: int = 10_000
    max_body_bytes: int = 48 * 1024 * 1024
    """Largest request body on any route (routes have tighter limits of their own)."""
    workers: int = 0
    """Engine worker threads; 0 = one per core for CPU engines, one per KV slot for batched engines (Qwen3)."""
    max_streams: int | None = None
    """Admission control: concurrent utterances accepted before new ones get 429/1013; None = derived from
    the real-time capacity the server measures (``server.live_capacity``), or the engine's own limit."""
    admission: Admission = "live"
    """``live``: the limit follows capacity re-estimated from the work the server runs, the warm-up's figure
    only its start (``server.live_capacity``); ``fixed``: the warm-up's limit for the server's life (as
    before issue 31, for A/B runs). ``max_streams`` wins over either."""
    max_queue: int = 64
    model_aliases: dict[str, str] = field(default_factory=dict)
    voice_aliases: dict[str, str] = field(default_factory=dict)
    preset_voice_aliases: bool = True
    """OpenAI voice names and Qwen3 preset speakers the engine lacks alias to its default voice."""
    default_seed: int | None = None
    """Seed of every request that sends none (a request's own ``seed`` wins): Piper then synthesizes without
    noise and Qwen3 samples from this seed, so every reply is in the same voice; None = unseeded."""
    ws_idle_timeout_s: float = 30.0
    max_lead_s: float = 10.0
    """Flow control: seconds of audio an utterance makes ahead of what its transport has taken (socket or HTTP
    body), not of a playback clock; at the lead its work waits for the reader. 0 = unbounded."""
    trim_leading_silence: bool = True
    """Cut the silence an utterance starts with (keeping 15 ms of onset), so the first byte is heard at once."""
    aligner: str = "auto"
    """Word timings by forced alignment (``speakwire.aligners``): ``auto`` (the engine's own where it has them, Piper;
    else PocketSphinx for English when installed; else none), ``none``, ``pocketsphinx``, ``qwen3:<model>``
    (Qwen3-ForcedAligner from a local directory or a hub id). A named aligner replaces the engine's own timings."""
    aligner_timeout_s: float | None = None
    """How long a sentence waits for its words before it goes without them (``synthesis.aligning``); None =
    ``max(1 s, 2 × the sentence's audio)``."""
    aligner_download: bool = False
    """Let ``qwen3:<hub id>`` download the aligner's weights; otherwise only the local Hugging Face cache is read."""
    write_stall_timeout_s: float = 30.0
    """A stream whose transport takes nothing for this long is ended and its connection closed (WebSocket 1008,
    an HTTP body cut short), counted in ``speakwire_stalled_closes_total``. 0 = never."""
    ws_config_timeout_s: float = 10.0
    drain_timeout_s: float = 25.0
    """On SIGTERM: how long utterances in flight may take to finish before what remains is closed (1001);
    SageMaker kills the container 30 s after SIGTERM (``server.drain``)."""
    allow_remote_ref_audio: bool = False
    data_dir: str | None = None
    max_voices: int | None = None
    """Saved-voice cap; None = ``SPEAKWIRE_MAX_VOICES`` or 1000."""
    voices_url: str | None = None
    """``s3://bucket/prefix``: one voice library shared by every instance, ``data_dir`` its cache; None = local."""
    wyoming_port: int | None = None
    """Also serve the Wyoming protocol (Home Assistant) on this TCP port of ``host``; None = off (10200 is usual)."""
    sagemaker: bool = False
    sagemaker_default_route: str = "/v1/audio/speech"
    warmup: bool = True
    log_level: str = "info"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Defaults, then ``SPEAKWIRE_*`` variables, then explicit overrides (CLI flags)."""
        environ = os.environ if environ is None else environ
        settings = cls()
        env_map: dict[str, tuple[str, Callable[[str], object]]] = {
            "HOST": ("host", str), "PORT": ("port", int), "ENGINE": ("engine", str), "MODEL": ("model", str),
            "API_KEY": ("api_key", str), "MAX_INPUT_CHARS": ("max_input_chars", int), "WORKERS": ("workers", int),
            "MAX_STREAMS": ("max_streams", int), "MAX_QUEUE": ("max_queue", int), "DATA_DIR": ("data_dir", str),
            "DEVICE": ("device", str), "DTYPE": ("dtype", str), "LOG_LEVEL": ("log_level", str),
            "WS_IDLE_TIMEOUT": ("ws_idle_timeout_s", float), "MAX_BATCH": ("max_batch", int),
            "PUBLIC_METRICS": ("public_metrics", _flag), "MAX_BODY_BYTES": ("max_body_bytes", int),
            "CUDA_GRAPHS": ("cuda_graphs", _flag), "PRESET_VOICE_ALIASES": ("preset_voice_aliases", _flag),
            "WYOMING_PORT": ("wyoming_port", int), "SEED": ("default_seed", parse_seed),
            "DRAIN_TIMEOUT": ("drain_timeout_s", float), "MAX_LEAD_S": ("max_lead_s", float),
            "WRITE_STALL_TIMEOUT": ("write_stall_timeout_s", float),
            "TRIM_LEADING_SILENCE": ("trim_leading_silence", _flag),
            "ALIGNER": ("aligner", str), "ALIGNER_TIMEOUT": ("aligner_timeout_s", float),
            "ALIGNER_DOWNLOAD": ("aligner_download", _flag), "ADMISSION": ("admission", parse_admission),
        }  # fmt: skip
        for env_name, (attr, kind) in env_map.items():
            raw = environ.get(f"SPEAKWIRE_{env_name}")
            if raw is not None and raw != "":
                try:
                    setattr(settings, attr, kind(raw))
                except ValueError as exc:
                    raise ValueError(f"SPEAKWIRE_{env_name}={raw!r}: {exc}") from None
        for key, value in overrides.items():
            if value is not None:
                setattr(settings, key, value)
        return settings
