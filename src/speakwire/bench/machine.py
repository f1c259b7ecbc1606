"""Describe the machine a benchmark ran on, so a number is never read without its hardware.

Also records the load average at the start: a shared machine (other test runs) makes every number
noisy, and the result file should say so rather than leave the reader to guess.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, rounded; None where the OS has none."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def cores() -> int:
    """Cores this process may run on (its affinity), which can be fewer than the machine has."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5, check=False).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError):
        pass
    return None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_revision() -> str | None:
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, timeout=5, check=False,
            cwd=Path(__file__).resolve().parent,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def describe(*, torch_device: str | None = None) -> dict[str, Any]:
    """CPU model, cores, memory, OS, Python and the versions of the packages that set the speed.

    Args:
        torch_device: For benchmarks that run torch: its version and threads, the device, and for a CUDA
            device the GPU's name and memory (imports torch).
    """
    machine: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cores_available": cores(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "onnxruntime": _version("onnxruntime"),
        "piper_tts": _version("piper-tts"),
        "speakwire": _version("speakwire"),
        "git": _git_revision(),
        "load_average_at_start": load_average(),
    }
    if torch_device is not None:
        import torch

        machine.update(torch=torch.__version__, torch_threads=torch.get_num_threads(), device=torch_device)
        if torch_device.startswith("cuda") and torch.cuda.is_available():
            machine["gpu"] = torch.cuda.get_device_name(0)
            machine["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return machine


def one_line(machine: dict[str, Any]) -> str:
    """``AMD EPYC, 2 cores, 23.4 GiB, onnxruntime 1.x, load 0.1/0.2/0.3`` for report headers."""
    load = machine.get("load_average_at_start")
    load_text = "/".join(f"{x:.1f}" for x in load) if load else "n/a"
    torch = f", torch {machine['torch']} ({machine['torch_threads']} threads)" if "torch" in machine else ""
    gpu = f", {machine['gpu']} ({machine['gpu_memory_gib']} GiB)" if "gpu" in machine else ""
    return (
        f"{machine['cpu_model']}, {machine['cpu_count']} cores, {machine['memory_gib']} GiB, "
        f"Python {machine['python']}, onnxruntime {machine['onnxruntime']}, piper-tts {machine['piper_tts']}"
        f"{torch}{gpu}, load average at start {load_text}"
    )
