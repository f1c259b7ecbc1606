"""Every UI test runs with an ``ffmpeg`` on PATH that records being called and fails: the UI must never need one.

Gradio reaches for the ``ffmpeg`` program (and ``ffprobe``) by name through PATH, at the moment it needs
them; the stand-ins shadow any installed copy, so a test passes only if nothing in the UI ran either.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

PROGRAMS = ("ffmpeg", "ffprobe")


@pytest.fixture(scope="module", autouse=True)
def no_ffmpeg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Shadow ffmpeg/ffprobe for the module; fail it if either was run. Yields the call log."""
    bin_dir = tmp_path_factory.mktemp("no-ffmpeg")
    log = bin_dir / "calls.log"
    for name in PROGRAMS:
        program = bin_dir / name
        program.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\necho "{name}: not for the UI" >&2\nexit 127\n')
        program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    saved = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(bin_dir), saved])
    try:
        yield log
    finally:
        os.environ["PATH"] = saved
    calls = log.read_text() if log.exists() else ""
    assert calls == "", f"the UI ran ffmpeg:\n{calls}"
