"""The load benchmark: every target at every concurrency level (a closed loop), then the report.

``speakwire bench`` (with no name, or ``load``) lands in ``run()``. The engine is loaded and the servers
are started (and warmed up) first and stay up, idle when not measured; then each concurrency level
runs every target in turn, one at a time so they never compete for the cores. Interleaving by level,
rather than target after target, matters on a shared machine: load drifts over minutes, and targets
compared at one level should see the same conditions. Everything listens on loopback only, every
loop is bounded (a fixed number of utterances per level, a timeout per stream), and every child
process is stopped on the way out, error or Ctrl-C included.

Heavy imports wait until ``run()``.

    speakwire bench --out bench/results/<name>                                  # ~6 min on 2 cores
    speakwire bench load --out /tmp/bench --concurrency 1,4 --min-streams 2     # harness check, ~1 min
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.texts import paragraphs

if TYPE_CHECKING:
    from speakwire.bench.loadgen import StreamTarget
    from speakwire.bench.results import LevelResult

ALL_TARGETS = ("engine", "speakwire-http", "speakwire-ws", "piper-http")
DEFAULT_CONCURRENCY = "1,2,4,8,16,32"


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The load benchmark's options."""
    p.add_argument("--out", type=Path, help="Result folder (default: bench/results/<UTC time>).")
    p.add_argument("--url", help="Benchmark this running speakwire server instead of starting one.")
    p.add_argument("--server-pid", type=int, help="PID of the --url server, to report its CPU use.")
    p.add_argument("--targets", default=",".join(ALL_TARGETS),
                   help=f"Comma-separated subset of {', '.join(ALL_TARGETS)} (default: all).")  # fmt: skip
    p.add_argument("--concurrency", default=DEFAULT_CONCURRENCY,
                   help=f"Concurrent streams per level, comma-separated (default {DEFAULT_CONCURRENCY}).")  # fmt: skip
    p.add_argument("--min-streams", type=int, default=8,
                   help="Utterances per level: max(concurrency, this); default 8.")  # fmt: skip
    p.add_argument("--texts", type=Path, help="JSON with a 'paragraphs' list (default: the packaged texts).")
    p.add_argument("--words-per-piece", type=int, default=5, help="WebSocket text feed: words per input.text.")
    p.add_argument("--piece-interval", type=float, default=0.05, help="WebSocket text feed: seconds between pieces.")
    p.add_argument("--workers", type=int, help="Engine threads of the speakwire server it starts (default: its own).")
    p.add_argument("--piper-model", type=Path, help="Piper voice .onnx for every target (default: embedded joe voice).")
    p.add_argument("--stream-timeout", type=float, default=120.0, help="Give up on one utterance after this (s).")
    p.add_argument("--level-pause", type=float, default=1.0, help="Idle seconds between levels (lets queues drain).")
    p.add_argument("--profile", type=int, metavar="STREAMS",
                   help="Record the speakwire server with py-spy during its levels at this concurrency.")  # fmt: skip


def _parse_concurrency(value: str) -> list[int]:
    try:
        levels = sorted({int(x) for x in value.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--concurrency must be integers separated by commas, got {value!r}") from None
    if not levels or levels[0] < 1:
        raise SystemExit("--concurrency needs positive integers")
    return levels


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _progress(level: LevelResult) -> None:
    s = level.summary()

    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value * 1000:.0f} ms"

    _log(
        f"{s['target']:>13} × {s['concurrency']:<3} TTFA p50 {ms(s['ttfa_p50_s'])}, p95 {ms(s['ttfa_p95_s'])}, "
        f"audible p95 {ms(s['audible_p95_s'])}; "
        f"{s['throughput'] or 0:.1f}× real time; underruns/stream {s['underruns_per_stream'] or 0:.2f}; "
        f"errors {s['errors']}/{s['streams']}"
    )


@contextlib.contextmanager
def _py_spy(pid: int | None, out: Path, enabled: bool) -> Iterator[None]:
    """py-spy record the server for the duration of the block (SIGINT makes it write the profile)."""
    exe = shutil.which("py-spy")
    if not enabled or pid is None or exe is None:
        if enabled:
            _log("profiling skipped: needs py-spy (pip install py-spy) and a known server pid")
        yield
        return
    argv = [exe, "record", "--pid", str(pid), "--rate", "100", "--nonblocking", "--threads",
            "--format", "raw", "-o", str(out)]  # fmt: skip
    with (out.with_suffix(".log")).open("wb") as log:
        recorder = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        time.sleep(0.5)
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        try:
            recorder.wait(30)
        except subprocess.TimeoutExpired:
            recorder.kill()
            recorder.wait(5)
        _log(f"profile written to {out} (collapsed stacks; e.g. flamegraph.pl or speedscope)")


class _Run:
    """One benchmark run's state: options, texts, where results go, what finished."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
        unknown = sorted(set(self.targets) - set(ALL_TARGETS))
        if unknown:
            raise SystemExit(f"unknown target(s) {', '.join(unknown)}; choose from {', '.join(ALL_TARGETS)}")
        self.concurrency = _parse_concurrency(args.concurrency)
        self.texts = paragraphs(args.texts)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d-%H%M%S")
        self.out: Path = args.out or Path("bench") / "results" / stamp
        self.levels: list[LevelResult] = []
        self.skipped: dict[str, str] = {}
        self.engine_info: dict[str, Any] = {}
        """What the in-process engine reported (e.g. whether it streams frames): the server loads the same."""

    def streams_at(self, concurrency: int) -> int:
        return max(concurrency, int(self.args.min_streams))

    def model_path(self) -> Path:
        if self.args.piper_model:
            return Path(self.args.piper_model)
        from speakwire.engines.piper import embedded_voice_paths

        return embedded_voice_paths()[0]

    def pause(self) -> None:
        if self.args.level_pause > 0:
            time.sleep(self.args.level_pause)

    # ----- targets: each returns "run one level at this concurrency" -------------------------

    def setup(self, stack: contextlib.ExitStack) -> dict[str, Callable[[int], LevelResult]]:
        """Load the engine and start the servers (stopped by ``stack``), warmed up; one runner per target."""
        runners: dict[str, Callable[[int], LevelResult]] = {}
        if "engine" in self.targets:
            runners["engine"] = self._engine_runner()
        wanted = [t for t in ("speakwire-http", "speakwire-ws") if t in self.targets]
        if wanted:
            runners.update(self._speakwire_runners(stack, wanted))
        if "piper-http" in self.targets:
            runners.update(self._piper_runner(stack))
        return runners

    def _engine_runner(self) -> Callable[[int], LevelResult]:
        from speakwire.bench.engine_loop import run_engine_level
        from speakwire.bench.process import CpuMeter
        from speakwire.engines.base import SynthesisRequest
        from speakwire.engines.piper import PiperEngine

        _log("engine: loading the Piper voice in this process (no server)")
        engine = PiperEngine.load(self.args.piper_model)
        self.engine_info = {"model": engine.info.model, **engine.info.extra}
        for _ in engine.synthesize("Hello.", engine.validate(SynthesisRequest())):
            pass  # warm-up, as the server does before it says ready

        def level(conc: int) -> LevelResult:
            meter = CpuMeter(os.getpid())
            meter.start()
            result = run_engine_level(engine, self.texts, concurrency=conc, streams=self.streams_at(conc))
            result.server_cpu_pct = meter.stop()
            return result

        return level

    def _speakwire_runners(
        self, stack: contextlib.ExitStack, wanted: Sequence[str]
    ) -> dict[str, Callable[[int], LevelResult]]:
        from speakwire.bench.loadgen import SpeakwireHttpTarget, SpeakwireWebSocketTarget
        from speakwire.bench.servers import speakwire_server, websocket_url

        if self.args.url:
            base, pid = self.args.url.rstrip("/"), self.args.server_pid
        else:
            server = speakwire_server(self.out, workers=self.args.workers, max_streams=max(64, *self.concurrency))
            _log(f"speakwire: starting `{' '.join(server.argv[1:])}` and waiting for /ready")
            stack.enter_context(server)
            base, pid = server.url, server.pid
        ws_url = websocket_url(base, "/v1/audio/speech/stream")
        factories: dict[str, Callable[[int], StreamTarget]] = {
            "speakwire-http": lambda conc: SpeakwireHttpTarget(
                base, timeout_s=self.args.stream_timeout, max_connections=conc + 4
            ),
            "speakwire-ws": lambda conc: SpeakwireWebSocketTarget(
                ws_url,
                timeout_s=self.args.stream_timeout,
                words_per_piece=self.args.words_per_piece,
                piece_interval_s=self.args.piece_interval,
            ),
        }
        runners: dict[str, Callable[[int], LevelResult]] = {}
        for name in wanted:
            self._warm_up(factories[name](1))

            def level(conc: int, name: str = name) -> LevelResult:
                profile = self.out / f"profile-{name}-{conc}.txt"
                with _py_spy(pid, profile, self.args.profile == conc):
                    return self._network_level(factories[name](conc), conc, pid, metrics_url=base)

            runners[name] = level
        return runners

    def _piper_runner(self, stack: contextlib.ExitStack) -> dict[str, Callable[[int], LevelResult]]:
        import importlib.util

        from speakwire.bench.loadgen import PiperHttpTarget
        from speakwire.bench.servers import piper_server

        if importlib.util.find_spec("flask") is None:
            self.skipped["piper-http"] = "Flask is not installed (the [bench] extra: pip install 'speakwire[bench]')"
            _log(f"piper-http skipped: {self.skipped['piper-http']}")
            return {}
        server = piper_server(self.out, self.model_path())
        _log("piper-http: starting Piper's own server (python -m piper.http_server)")
        stack.enter_context(server)
        base = server.url
        self._warm_up(PiperHttpTarget(base, timeout_s=self.args.stream_timeout))

        def level(conc: int) -> LevelResult:
            target = PiperHttpTarget(base, timeout_s=self.args.stream_timeout, max_connections=conc + 4)
            return self._network_level(target, conc, server.pid, metrics_url=None)

        return {"piper-http": level}

    # ----- helpers ------------------------------------------------------------------------------

    def _warm_up(self, target: StreamTarget) -> None:
        """One short utterance first, so no level pays for connection setup or lazy initialisation."""
        from speakwire.bench.loadgen import run_level

        level = asyncio.run(run_level(target, ["Warming up."], concurrency=1, streams=1))
        if level.streams[0].error:
            raise RuntimeError(f"{target.name}: warm-up failed: {level.streams[0].error}")

    def _network_level(
        self, target: StreamTarget, conc: int, pid: int | None, *, metrics_url: str | None
    ) -> LevelResult:
        from speakwire.bench.loadgen import run_level
        from speakwire.bench.metrics import metric
        from speakwire.bench.process import CpuMeter

        server_meter, client_meter = CpuMeter(pid), CpuMeter(os.getpid())
        underruns_before = metric(metrics_url, "speakwire_underruns_total") if metrics_url else None
        server_meter.start()
        client_meter.start()
        level = asyncio.run(run_level(target, self.texts, concurrency=conc, streams=self.streams_at(conc)))
        level.server_cpu_pct = server_meter.stop()
        level.client_cpu_pct = client_meter.stop()
        if metrics_url and underruns_before is not None:
            after = metric(metrics_url, "speakwire_underruns_total")
            level.server_underruns = None if after is None else round(after - underruns_before)
        return level

    def add(self, level: LevelResult) -> None:
        self.levels.append(level)
        _progress(level)
        self.pause()

    def config(self, started: float) -> dict[str, Any]:
        return {
            "targets": self.targets,
            "skipped": self.skipped,
            "concurrency": self.concurrency,
            "min_streams": self.args.min_streams,
            "texts": len(self.texts),
            "text_chars": [len(t) for t in self.texts],
            "words_per_piece": self.args.words_per_piece,
            "piece_interval_s": self.args.piece_interval,
            "speakwire_url": self.args.url,
            "speakwire_workers": self.args.workers,
            "engine": self.engine_info,
            "profile_concurrency": self.args.profile,
            "started_utc": datetime.datetime.fromtimestamp(started, datetime.UTC).isoformat(timespec="seconds"),
            "elapsed_s": round(time.time() - started, 1),
        }


def run(args: argparse.Namespace) -> int:
    """Run every requested target and write results; returns a process exit code."""
    from speakwire.bench.machine import describe
    from speakwire.bench.report import write_all

    bench = _Run(args)
    bench.out.mkdir(parents=True, exist_ok=True)
    machine = describe()
    started = time.time()
    _log(f"results go to {bench.out}; targets {', '.join(bench.targets)}; concurrency {bench.concurrency}")
    failed = False
    try:
        with contextlib.ExitStack() as stack:
            runners = bench.setup(stack)
            # Level by level, every target in turn: load on a shared machine drifts over minutes, and
            # interleaving lets all targets at one concurrency see the same conditions.
            for conc in bench.concurrency:
                for name in ALL_TARGETS:
                    if name in runners:
                        bench.add(runners[name](conc))
    except (RuntimeError, OSError) as exc:
        failed = True
        _log(f"benchmark stopped early: {exc}")
    except KeyboardInterrupt:
        failed = True
        _log("interrupted; writing what finished")
    finally:
        if bench.levels:
            paths = write_all(bench.out, bench.levels, machine, bench.config(started))
            _log("wrote " + ", ".join(str(p) for p in paths.values()))
    _log(f"done in {time.time() - started:.0f} s")
    return 1 if failed or not bench.levels else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
