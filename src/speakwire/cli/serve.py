"""``speakwire serve``: run the server (the embedded voice by default)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import sys
from typing import TYPE_CHECKING, Any

from speakwire.settings import ADMISSION_MODES, Settings, parse_seed

if TYPE_CHECKING:
    import uvicorn


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="Run the speech server.", description="Run the speech server.")
    p.add_argument("--host", help="Bind address (default 127.0.0.1; 0.0.0.0 with --sagemaker).")
    p.add_argument("--port", type=int, help="Port (default 8000; 8080 with --sagemaker).")
    p.add_argument("--engine", choices=("piper", "qwen3"), help="Engine (default piper, the embedded voice).")
    p.add_argument("--voice", help="Piper voice file (.onnx, with its .onnx.json beside it).")
    p.add_argument("--model", help="Qwen3-TTS model: a local directory or a hub id (with --engine qwen3).")
    p.add_argument("--device", help="cuda, cuda:0, cpu (Qwen3; default: CUDA when available).")
    p.add_argument("--dtype", help="bfloat16, float16, float32 (Qwen3; default bf16 on CUDA, fp32 on CPU).")
    p.add_argument("--gpu-memory-utilization", type=float, help="Fraction of GPU memory this process may use.")
    p.add_argument("--api-key", default=os.environ.get("SPEAKWIRE_API_KEY"), help="Require this bearer key.")
    p.add_argument("--insecure", action="store_true", help="Allow a non-loopback host without an API key.")
    p.add_argument("--public-metrics", action="store_true", help="With --api-key: leave /metrics and /docs open.")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction,
                   help="Qwen3 on CUDA: capture the loop step as one CUDA graph per batch and span bucket at load "
                   "(default: on with CUDA; --no-cuda-graphs runs it eagerly).")  # fmt: skip
    p.add_argument("--max-batch", type=int, help="Qwen3: utterances generating at once (default: memory budget, ≤ 64).")
    p.add_argument("--workers", type=int, help="Engine worker threads (default: one per core; Qwen3: one per slot).")
    p.add_argument("--max-streams", type=int, help="Concurrent streams before 429/1013 (default: from the "
                   "capacity the server measures, at warm-up and then live).")  # fmt: skip
    p.add_argument("--admission", choices=ADMISSION_MODES,
                   help="live: the stream limit follows capacity re-estimated from the work the server runs (the "
                   "warm-up only its start); fixed: the warm-up's limit for the server's life (default live, or "
                   "SPEAKWIRE_ADMISSION).")  # fmt: skip
    p.add_argument("--max-input-chars", type=int, help="HTTP input limit (default 10000).")
    p.add_argument("--trim-leading-silence", action=argparse.BooleanOptionalAction,
                   help="Cut the silence each utterance starts with, keeping 15 ms of onset (default: on; "
                   "--no-trim-leading-silence sends the engine's audio as it is).")  # fmt: skip
    p.add_argument("--aligner", type=_aligner, metavar="NAME",
                   help="Word timings by forced alignment: auto (the engine's own where it has them, else "
                   "PocketSphinx for English when installed), none, pocketsphinx, qwen3:<dir or hub id> "
                   "(Qwen3-ForcedAligner, 11 languages); a named aligner replaces the engine's own timings "
                   "(default auto, or SPEAKWIRE_ALIGNER).")  # fmt: skip
    p.add_argument("--aligner-timeout", type=_positive, metavar="S",
                   help="Seconds a sentence waits for its word timings before it goes without them (default: "
                   "max(1, 2 x the sentence's audio)); audio never waits longer.")  # fmt: skip
    p.add_argument("--aligner-download", action="store_true",
                   help="Let --aligner qwen3:<hub id> download its weights (default: the local Hugging Face cache "
                   "only).")  # fmt: skip
    p.add_argument("--max-lead-s", type=float, metavar="S",
                   help="Seconds of audio a stream is synthesized ahead of what its client has read (default 10; "
                   "0 = unbounded).")  # fmt: skip
    p.add_argument(
        "--write-stall-timeout",
        type=float,
        metavar="S",
        help="Close a stream whose client reads nothing for this long (default 30; 0 = never).",
    )
    p.add_argument("--data-dir", help="Where saved voices live (default: per-user data dir).")
    p.add_argument("--max-voices", type=int, help="Saved-voice cap (default 1000, or SPEAKWIRE_MAX_VOICES).")
    p.add_argument("--voices-url", metavar="s3://BUCKET/PREFIX",
                   help="One voice library in S3 for every instance, --data-dir its cache (or SPEAKWIRE_VOICES_URL; "
                   "default: the local library).")  # fmt: skip
    p.add_argument("--allow-remote-ref-audio", action="store_true", help="Let ref_audio be an http(s) URL.")
    p.add_argument("--seed", type=_seed, metavar="N",
                   help="Seed of every request that sends none, so every reply is in the same voice (0 to 2**32-1; "
                   "a request's own seed wins; default: unseeded).")  # fmt: skip
    p.add_argument(
        "--model-alias",
        action="append",
        default=[],
        metavar="ALIAS=MODEL",
        help="Extra model name accepted for the served model (repeatable; OpenAI names are built in).",
    )
    p.add_argument(
        "--voice-alias",
        action="append",
        default=[],
        metavar="ALIAS=VOICE",
        help="Map a voice name to one of the engine's voices, e.g. alloy=Vivian (repeatable).",
    )
    p.add_argument(
        "--no-preset-voice-aliases",
        action="store_true",
        help="Refuse (404, or the vendor's own error) the voice names stock clients send by default and the engine "
        "lacks: OpenAI's, Qwen3's preset speakers (Vivian, ...), ElevenLabs' premade and Cartesia's default voice "
        "ids, Deepgram's Aura voices (speakwire.voice_presets), instead of speaking them with the default voice.",
    )
    p.add_argument(
        "--wyoming-port",
        type=int,
        metavar="PORT",
        help="Also serve Wyoming (Home Assistant) TTS on this TCP port (10200 is usual; default off).",
    )
    p.add_argument("--sagemaker", action="store_true", help="SageMaker container mode: 0.0.0.0:8080, /ping.")
    p.add_argument("--log-level", default=os.environ.get("SPEAKWIRE_LOG_LEVEL", "info"),
                   choices=("critical", "error", "warning", "info", "debug"))  # fmt: skip
    p.set_defaults(func=run)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _seed(raw: str) -> int:
    try:
        return parse_seed(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _aligner(raw: str) -> str:
    from speakwire.aligners.registry import canonical_name

    try:
        return canonical_name(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {raw!r}")
    return value


def _voices_url_problem(flag: str | None) -> str | None:
    """What is wrong with ``--voices-url`` (or ``SPEAKWIRE_VOICES_URL``), before anything starts; None: nothing."""
    from speakwire.voices.backend import voices_url_from_env
    from speakwire.voices.s3 import S3Location

    url = flag or voices_url_from_env()
    if url is None:
        return None
    try:
        S3Location.parse(url)
    except ValueError as exc:
        return str(exc)
    return None


def _aliases(pairs: list[str], flag: str) -> dict[str, str]:
    aliases = {}
    for pair in pairs:
        name, sep, target = pair.partition("=")
        if not sep or not name.strip() or not target.strip():
            raise SystemExit(f"{flag} expects ALIAS=TARGET, got {pair!r}")
        aliases[name.strip()] = target.strip()
    return aliases


def build_settings(args: argparse.Namespace) -> Settings:
    try:
        return _settings(args)
    except ValueError as exc:  # a SPEAKWIRE_* variable that does not parse: say which, without a traceback
        raise SystemExit(f"speakwire serve: {exc}") from None


def _settings(args: argparse.Namespace) -> Settings:
    overrides = _flag_overrides(args)
    if args.sagemaker:
        from speakwire.server.sagemaker.config import sagemaker_settings

        return sagemaker_settings(overrides)
    settings = Settings.from_env(**overrides)
    if args.voice and settings.engine != "piper":
        raise SystemExit("--voice is a Piper voice file; use --model with --engine qwen3")
    return settings


def _flag_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags give (None: not given), the same in SageMaker mode and out of it."""
    return dict(
        host=args.host, port=args.port, engine=args.engine, model=args.model or args.voice, device=args.device,
        dtype=args.dtype, gpu_memory_utilization=args.gpu_memory_utilization, api_key=args.api_key,
        insecure=args.insecure or None, public_metrics=args.public_metrics or None, workers=args.workers,
        max_streams=args.max_streams, admission=args.admission, max_batch=args.max_batch, cuda_graphs=args.cuda_graphs,
        max_input_chars=args.max_input_chars, data_dir=args.data_dir, max_voices=args.max_voices,
        voices_url=args.voices_url,
        allow_remote_ref_audio=args.allow_remote_ref_audio or None, log_level=args.log_level,
        model_aliases=_aliases(args.model_alias, "--model-alias") or None,
        voice_aliases=_aliases(args.voice_alias, "--voice-alias") or None,
        preset_voice_aliases=False if args.no_preset_voice_aliases else None, wyoming_port=args.wyoming_port,
        default_seed=args.seed, max_lead_s=args.max_lead_s, write_stall_timeout_s=args.write_stall_timeout,
        trim_leading_silence=args.trim_leading_silence, aligner=args.aligner,
        aligner_timeout_s=args.aligner_timeout, aligner_download=args.aligner_download or None,
    )  # fmt: skip


def uvicorn_config(app: Any, *, host: str, port: int, log_level: str) -> uvicorn.Config:
    """How uvicorn serves speakwire, here and in the test servers (so tests run what production runs).

    No permessage-deflate: audio frames do not compress (PCM saved 0.1 %) and zlib ran on the event loop,
    tripling its CPU per PCM utterance (7.4 → 21.8 ms); a client that offers the extension gets none.
    WebSockets through ``websockets-sansio`` (uvicorn's ``auto`` since 0.50, named so an older or newer default
    cannot change it): an idle session's cost (~37 KiB, ``bench/idle_sessions.py``) was measured on it.
    """
    import uvicorn

    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level, log_config=uvicorn_log_config(), ws="websockets-sansio",
        ws_ping_interval=20, ws_ping_timeout=20, ws_per_message_deflate=False, timeout_graceful_shutdown=10,
    )  # fmt: skip


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging config, with the request id in its lines (the access line and its errors').

    uvicorn logs a request's access line while the response starts, inside the request's handling, so the line
    names the id the response carries (``server.request_ids``); lines about no request say ``req=-``.
    """
    import copy

    from uvicorn.config import LOGGING_CONFIG

    from speakwire.server.request_ids import RequestIdFilter

    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {**config.get("filters", {}), "request_id": {"()": RequestIdFilter}}
    for name in ("default", "access"):
        config["handlers"][name].setdefault("filters", []).append("request_id")
        formatter = config["formatters"][name]
        formatter["fmt"] = formatter["fmt"].replace("%(levelprefix)s ", "%(levelprefix)s [req=%(request_id)s] ", 1)
    return config


def run(args: argparse.Namespace) -> int:
    from speakwire.server.app import create_app
    from speakwire.server.drain import DrainingServer
    from speakwire.server.request_ids import LOG_FORMAT, install_log_filter

    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT)
    install_log_filter(logging.getLogger().handlers)  # every line names its request (server.request_ids)
    settings = build_settings(args)
    if not _is_loopback(settings.host) and not settings.api_key and not (settings.insecure or settings.sagemaker):
        print(
            f"refusing to listen on {settings.host} without an API key: pass --api-key (or SPEAKWIRE_API_KEY), "
            "or --insecure to serve without one",
            file=sys.stderr,
        )
        return 2
    if settings.wyoming_port is not None and not _is_loopback(settings.host) and not settings.insecure:
        print(
            f"refusing to serve Wyoming on {settings.host}: the protocol has no authentication (--api-key does not "
            "cover it); pass --insecure to serve it anyway, or bind a loopback --host",
            file=sys.stderr,
        )
        return 2
    if problem := _voices_url_problem(settings.voices_url):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    app = create_app(settings)
    # SIGTERM drains first (server.drain: stop admitting, let utterances in flight finish, close 1001), then
    # uvicorn's shutdown; timeout_graceful_shutdown applies to SIGINT, which skips the drain.
    server = DrainingServer(
        uvicorn_config(app, host=settings.host, port=settings.port, log_level=args.log_level), app.state.speakwire
    )
    app.state.speakwire.on_load_failure = lambda: setattr(server, "should_exit", True)
    server.run()
    load_error = app.state.speakwire.load_error
    if load_error:
        part = app.state.speakwire.failed_part or f"the {settings.engine} engine"
        print(f"speakwire: {part} failed to load: {load_error}", file=sys.stderr)
        return 1
    return 0
