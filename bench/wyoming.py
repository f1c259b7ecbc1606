"""speakwire's Wyoming port against Home Assistant's own wyoming-piper, same voice file, one wyoming-bench run.

    python -m bench.wyoming [--rounds 3] [--out bench/results/wyoming-2core] [-- <more wyoming-bench args>]

Starts both servers on free loopback ports, each in its own process:
- ours: ``speakwire serve --wyoming-port P`` (the embedded Piper voice);
- theirs: ``python -m wyoming_piper --uri tcp://127.0.0.1:Q --voice <the same .onnx>`` (the voice by path, with
  its ``.onnx.json`` beside it, so nothing is downloaded);
then runs ``wyoming-bench tts ours theirs --mode both --rounds N`` (each measurement a new connection; one
untimed warm-up per mode) and saves its output, the command and the machine under ``--out``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from speakwire.bench.catalogue import argument_parser
from speakwire.bench.machine import describe, load_average
from speakwire.bench.servers import ServerProcess, free_port, speakwire_server
from speakwire.engines.piper import embedded_voice_paths

BIN = Path(sys.executable).parent
PACKAGES = ("speakwire", "wyoming", "wyoming-piper", "wyoming-bench", "piper-tts", "onnxruntime")


def describes(port: int) -> Callable[[], bool]:
    """A readiness check: the Wyoming server at ``port`` answers ``describe`` (wyoming-piper has no /ready)."""

    def check() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(b'{"type": "describe", "version": "1.10.2"}\n')
                return b'"info"' in sock.makefile("rb").readline()
        except OSError:
            return False

    return check


def version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(package)
    except PackageNotFoundError:
        return "not installed"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argument_parser(__name__, __doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", default="both", choices=("non_streaming", "streaming", "both"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/wyoming-2core"))
    parser.add_argument("--theirs-first", action="store_true", help="benchmark wyoming-piper first (order check)")
    parser.add_argument("extra", nargs="*", help="more wyoming-bench arguments (after --)")
    args = parser.parse_args(argv)
    model, _config = embedded_voice_paths()
    machine = describe()
    with tempfile.TemporaryDirectory(prefix="wyoming-piper-") as data_dir:
        ours = free_port()
        speakwire = speakwire_server(Path(data_dir), "--wyoming-port", str(ours))
        http_ready = speakwire.ready
        speakwire.ready = lambda: http_ready() and describes(ours)()
        theirs = free_port()
        piper = ServerProcess("wyoming-piper", [
            sys.executable, "-m", "wyoming_piper", "--uri", f"tcp://127.0.0.1:{theirs}", "--data-dir", data_dir,
            "--voice", str(model),
        ], port=theirs, log_dir=Path(data_dir), ready=describes(theirs))  # fmt: skip
        with speakwire, piper:
            servers = [f"127.0.0.1:{ours}", f"127.0.0.1:{theirs}"]
            if args.theirs_first:
                servers.reverse()
            command = [str(BIN / "wyoming-bench"), "tts", *servers, "--mode", args.mode, "--rounds", str(args.rounds),
                       *args.extra]  # fmt: skip
            started = time.time()
            result = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
            load_after = load_average()
    print(result.stdout)
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        raise SystemExit(f"wyoming-bench exited with {result.returncode}")
    args.out.mkdir(parents=True, exist_ok=True)
    name = "wyoming-bench-theirs-first" if args.theirs_first else "wyoming-bench"
    (args.out / f"{name}.txt").write_text(result.stdout)
    run = {
        "command": " ".join(["wyoming-bench", *command[1:]]),
        "servers": {
            f"127.0.0.1:{ours}": "speakwire serve --wyoming-port (embedded Piper voice, en_US-joe-medium)",
            f"127.0.0.1:{theirs}": f"python -m wyoming_piper --voice {model.name} (the same file)",
        },
        "versions": {p: version(p) for p in PACKAGES},
        "machine": {**machine, "load_average_after": load_after},
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
    }
    (args.out / f"{name}.json").write_text(json.dumps(run, indent=2) + "\n")
    print(f"saved to {args.out}/", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
