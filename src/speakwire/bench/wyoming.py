"""speakwire's Wyoming port against Home Assistant's own wyoming-piper, same voice file, one wyoming-bench run.

    python bench/wyoming.py [--rounds 3] [--out bench/results/wyoming-2core] [-- <more wyoming-bench args>]

Starts both servers on free loopback ports, each in its own process:
- ours: ``speakwire serve --wyoming-port P`` (the embedded Piper voice);
- theirs: ``python -m wyoming_piper --uri tcp://127.0.0.1:Q --voice <the same .onnx>`` (the voice by path, with
  its ``.onnx.json`` beside it, so nothing is downloaded);
then runs ``wyoming-bench tts ours theirs --mode both --rounds N`` (each measurement a new connection; one
untimed warm-up per mode) and saves its output, the command and the machine under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder is first on sys.path, and its name would hide the wyoming package.
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

import httpx  # noqa: E402

from speakwire.bench.servers import free_port  # noqa: E402
from speakwire.engines.piper import embedded_voice_paths  # noqa: E402

BIN = Path(sys.executable).parent
PACKAGES = ("speakwire", "wyoming", "wyoming-piper", "wyoming-bench", "piper-tts", "onnxruntime")


def wait_for_describe(port: int, timeout_s: float = 120) -> None:
    """Until the Wyoming server at ``port`` answers ``describe`` (wyoming-piper has no readiness probe)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                sock.sendall(b'{"type": "describe", "version": "1.10.2"}\n')
                if b'"info"' in sock.makefile("rb").readline():
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"no Wyoming server answered on port {port}")


def wait_for_ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"speakwire at {url} did not become ready")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(package)
    except PackageNotFoundError:
        return "not installed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mode", default="both", choices=("non_streaming", "streaming", "both"))
    parser.add_argument("--out", type=Path, default=Path("bench/results/wyoming-2core"))
    parser.add_argument("--theirs-first", action="store_true", help="benchmark wyoming-piper first (order check)")
    parser.add_argument("extra", nargs="*", help="more wyoming-bench arguments (after --)")
    args = parser.parse_args()
    model, _config = embedded_voice_paths()
    http_port, ours, theirs = free_port(), free_port(), free_port()
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="wyoming-piper-") as data_dir:
        try:
            processes.append(subprocess.Popen([
                sys.executable, "-m", "speakwire", "serve", "--port", str(http_port), "--wyoming-port", str(ours),
                "--log-level", "warning",
            ]))  # fmt: skip
            processes.append(subprocess.Popen([
                sys.executable, "-m", "wyoming_piper", "--uri", f"tcp://127.0.0.1:{theirs}", "--data-dir", data_dir,
                "--voice", str(model),
            ]))  # fmt: skip
            wait_for_ready(f"http://127.0.0.1:{http_port}")
            wait_for_describe(ours)
            wait_for_describe(theirs)
            servers = [f"127.0.0.1:{ours}", f"127.0.0.1:{theirs}"]
            if args.theirs_first:
                servers.reverse()
            command = [str(BIN / "wyoming-bench"), "tts", *servers, "--mode", args.mode, "--rounds", str(args.rounds),
                       *args.extra]  # fmt: skip
            load_before = os.getloadavg()
            started = time.time()
            result = subprocess.run(command, capture_output=True, text=True, timeout=3600, check=False)
            load_after = os.getloadavg()
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
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
        "machine": {
            "cpu": cpu_model(),
            "cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        },
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "wall_s": round(time.time() - started, 1),
    }
    (args.out / f"{name}.json").write_text(json.dumps(run, indent=2) + "\n")
    print(f"saved to {args.out}/", file=sys.stderr)


if __name__ == "__main__":
    main()
