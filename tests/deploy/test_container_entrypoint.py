"""deploy/sagemaker/entrypoint.sh, run for real under /bin/sh with a fake ``speakwire`` on PATH."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).parents[2] / "deploy" / "sagemaker" / "entrypoint.sh"

# Prints its PID and arguments one per line, then (when asked) waits for SIGTERM and reports it.
FAKE_SPEAKWIRE = """#!/bin/sh
echo "pid=$$"
for arg in "$@"; do echo "arg=$arg"; done
if [ -n "${WAIT_FOR_TERM:-}" ]; then
    trap 'echo got-TERM; exit 0' TERM
    echo ready
    while :; do sleep 0.05; done
fi
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "speakwire"
    fake.write_text(FAKE_SPEAKWIRE)
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def run(env: dict[str, str], *args: str) -> list[str]:
    done = subprocess.run(["/bin/sh", str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def args_of(lines: list[str]) -> list[str]:
    return [line.removeprefix("arg=") for line in lines if line.startswith("arg=")]


def test_the_entrypoint_is_executable_posix_sh() -> None:
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert os.access(ENTRYPOINT, os.X_OK)


def test_serve_starts_the_server_in_sagemaker_mode(env: dict[str, str]) -> None:
    assert args_of(run(env, "serve")) == ["serve", "--sagemaker"]


def test_extra_serve_arguments_are_passed_through(env: dict[str, str]) -> None:
    assert args_of(run(env, "serve", "--port", "9000", "--log-level", "debug")) == [
        "serve",
        "--sagemaker",
        "--port",
        "9000",
        "--log-level",
        "debug",
    ]


def test_no_arguments_means_serve(env: dict[str, str]) -> None:
    assert args_of(run(env)) == ["serve", "--sagemaker"]


def test_any_other_command_runs_as_given(env: dict[str, str]) -> None:
    assert run(env, "echo", "hello world") == ["hello world"]
    assert args_of(run(env, "speakwire", "say", "--text", "a b")) == ["say", "--text", "a b"]


def test_the_server_replaces_the_shell_and_receives_sigterm(env: dict[str, str]) -> None:
    process = subprocess.Popen(
        ["/bin/sh", str(ENTRYPOINT), "serve"],
        env={**env, "WAIT_FOR_TERM": "1"},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        pid_line = process.stdout.readline().strip()
        assert pid_line == f"pid={process.pid}"  # exec: same process, no shell left in between
        while process.stdout.readline().strip() != "ready":
            pass
        time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        remaining, _ = process.communicate(timeout=5)
    finally:
        process.kill()
        process.wait()
    assert "got-TERM" in remaining
    assert process.returncode == 0
