"""The image's build context: exactly the files its Dockerfile copies, zipped deterministically, and their hash.

``speakwire sagemaker build`` ships the context to CodeBuild as a zip, and tags the image
by the context's hash so that a second build of the same tree finds the tag in ECR and
builds nothing. Both need the context to be a pure function of the files: what goes in
is read from the Dockerfile's own ``COPY``/``ADD`` sources (plus the Dockerfile), so a
new ``COPY`` line is picked up without a list to keep in step; caches (``__pycache__``,
``*.egg-info``) stay out; entries are sorted, dated 1980-01-01 and carry only the
executable bit. The hash covers paths, modes and contents — not the compressed bytes,
which could change with the zlib version. No I/O beyond reading the tree.
"""

from __future__ import annotations

import hashlib
import io
import json
import shlex
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

Variant = Literal["cpu", "cuda"]
VARIANTS: tuple[Variant, ...] = ("cpu", "cuda")
DOCKERFILE_DIR = PurePosixPath("deploy/sagemaker")

_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest date a zip entry can carry
_EXCLUDED_PARTS = frozenset({"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
_TAG_HASH_CHARS = 16
# Docker's official images, mirrored on ECR Public: CodeBuild pulls anonymously from shared addresses, which Docker
# Hub's pull limit often refuses (toomanyrequests); ECR Public has no such limit for AWS-hosted pulls.
OFFICIAL_IMAGE_MIRROR = "public.ecr.aws/docker/library/"


class BuildContextError(ValueError):
    """The Dockerfile names a source this tool cannot resolve, or a source is missing."""


@dataclass(frozen=True, slots=True)
class ContextFile:
    """One file of the context: its path from the repository root, whether it is executable, its bytes."""

    path: str
    executable: bool
    data: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class BuildContext:
    """The files a variant's Dockerfile needs, in zip order, and the hash that tags the image."""

    variant: Variant
    dockerfile: str
    files: tuple[ContextFile, ...]
    build_args: tuple[tuple[str, str], ...] = ()

    @property
    def digest(self) -> str:
        """SHA-256 (hex) over every path, mode and content, and the build arguments."""
        h = hashlib.sha256()
        for item in self.files:
            mode = "755" if item.executable else "644"
            h.update(f"{mode} {item.path} {hashlib.sha256(item.data).hexdigest()}\n".encode())
        for key, value in self.build_args:
            h.update(f"ARG {key}={value}\n".encode())
        return h.hexdigest()

    @property
    def tag(self) -> str:
        """The image tag: ``<variant>-<first 16 hex digits of the digest>``."""
        return f"{self.variant}-{self.digest[:_TAG_HASH_CHARS]}"

    @property
    def executables(self) -> tuple[str, ...]:
        """Paths to mark executable after unzipping (not every unzip keeps the mode bits)."""
        return tuple(item.path for item in self.files if item.executable)

    def zip_bytes(self) -> bytes:
        """The context as a zip whose bytes depend only on the files (and the zlib in use)."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for item in self.files:
                info = zipfile.ZipInfo(item.path, date_time=_ZIP_EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.create_system = 3  # Unix, so external_attr carries the mode
                info.external_attr = (0o100755 if item.executable else 0o100644) << 16
                archive.writestr(info, item.data, compresslevel=9)
        return buffer.getvalue()


def parse_build_args(assignments: Iterable[str]) -> dict[str, str]:
    """Repeated ``--build-arg KEY=VALUE`` flags.

    Raises:
        BuildContextError: A malformed or repeated one.
    """
    parsed: dict[str, str] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key.isidentifier():
            raise BuildContextError(f"--build-arg expects KEY=VALUE, got {assignment!r}")
        if key in parsed:
            raise BuildContextError(f"--build-arg {key} is given twice")
        parsed[key] = value
    return parsed


def mirrored_base_images(dockerfile_text: str, given: Mapping[str, str]) -> dict[str, str]:
    """Build args that move ``FROM ${ARG}`` bases from Docker Hub's official images to their ECR Public mirror.

    Only an ``ARG NAME=default`` declared before the first ``FROM``, used in a ``FROM`` line, not given by the
    user, whose default is an official image (``python:3.11-slim``, ``library/debian``) gets one; any image with a
    registry or an organisation (``nvidia/cuda``) is left alone.
    """
    defaults: dict[str, str] = {}
    bases: list[str] = []
    for instruction in _instructions(dockerfile_text):
        keyword, _, rest = instruction.partition(" ")
        if keyword.upper() == "ARG" and not bases:
            name, sep, value = rest.strip().partition("=")
            if sep:
                defaults[name.strip()] = value.strip().strip('"')
        elif keyword.upper() == "FROM":
            bases.append(rest.strip().split()[0])
    mirrored: dict[str, str] = {}
    for name, default in defaults.items():
        used = any(base in (f"${name}", f"${{{name}}}") for base in bases)
        path = _official_image_path(default)
        if used and name not in given and path is not None:
            mirrored[name] = OFFICIAL_IMAGE_MIRROR + path
    return mirrored


def _official_image_path(reference: str) -> str | None:
    """``python:3.11-slim`` for ``python:3.11-slim``, ``library/python:3.11-slim`` or ``docker.io/library/...``."""
    path = reference.removeprefix("docker.io/").removeprefix("library/")
    if not path or "$" in path or "/" in path or not path[0].isalnum():
        return None
    return path


def find_root(start: Path, fallback: Path | None = None) -> Path:
    """The repository root holding ``deploy/sagemaker``: ``start`` or one of its parents, else ``fallback``.

    Raises:
        BuildContextError: Neither holds the Dockerfiles (an installed wheel does not ship them).
    """
    candidates: list[Path] = [start, *start.parents]
    if fallback is not None:
        candidates.append(fallback)
    for candidate in candidates:
        if (candidate / DOCKERFILE_DIR / "Dockerfile.cpu").is_file():
            return candidate
    raise BuildContextError(
        "deploy/sagemaker/Dockerfile.* not found: run from a speakwire checkout or pass --context-dir"
    )


def dockerfile_path(variant: Variant) -> str:
    """``deploy/sagemaker/Dockerfile.<variant>``, relative to the repository root."""
    if variant not in VARIANTS:
        raise BuildContextError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return str(DOCKERFILE_DIR / f"Dockerfile.{variant}")


def copy_sources(dockerfile_text: str) -> list[str]:
    """The context paths (or globs) named by ``COPY``/``ADD`` lines, skipping ``--from=`` stage copies.

    Raises:
        BuildContextError: A source uses a variable or a URL, which a static context cannot resolve.
    """
    sources: list[str] = []
    for instruction in _instructions(dockerfile_text):
        keyword, _, rest = instruction.partition(" ")
        if keyword.upper() not in ("COPY", "ADD"):
            continue
        words = _arguments(rest.strip())
        flags = [w for w in words if w.startswith("--")]
        if any(flag.startswith("--from") for flag in flags):
            continue
        paths = [w for w in words if not w.startswith("--")]
        for source in paths[:-1]:  # the last word is the destination
            if "$" in source or "://" in source:
                raise BuildContextError(f"cannot resolve {keyword} source {source!r} statically")
            sources.append(source.removeprefix("./"))
    return sources


def collect(root: Path, variant: Variant, *, build_args: Mapping[str, str] | None = None) -> BuildContext:
    """Read the context of ``variant`` from the repository at ``root``.

    Args:
        root: Repository root (where ``pyproject.toml`` and ``deploy/`` are).
        variant: ``cpu`` (Piper) or ``cuda`` (Qwen3-TTS).
        build_args: ``--build-arg`` values for ``docker build``; they change the image, so the tag too.

    Raises:
        BuildContextError: The Dockerfile is missing, or a plain (non-glob) source does not exist.
    """
    dockerfile = dockerfile_path(variant)
    dockerfile_file = root / dockerfile
    if not dockerfile_file.is_file():
        raise BuildContextError(f"{dockerfile_file} not found: run from the speakwire repository root")
    paths: set[str] = {dockerfile}
    for source in copy_sources(dockerfile_file.read_text()):
        matches = sorted(root.glob(source)) if _is_glob(source) else [root / source]
        if not _is_glob(source) and not matches[0].exists():
            raise BuildContextError(f"{dockerfile} copies {source!r}, which is not in {root}")
        for match in matches:
            paths.update(_files_under(root, match))
    files = tuple(_read(root, path) for path in sorted(paths))
    args = tuple(sorted((build_args or {}).items()))
    return BuildContext(variant=variant, dockerfile=dockerfile, files=files, build_args=args)


def _instructions(text: str) -> Iterator[str]:
    """Dockerfile instructions with ``\\`` continuations joined and comments dropped."""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        yield (pending + line).strip()
        pending = ""
    if pending.strip():
        yield pending.strip()


def _arguments(rest: str) -> list[str]:
    """Flags (``--chown=...``, ``--from=...``) then the paths, in shell or JSON (exec) form."""
    if "[" in rest and rest.rstrip().endswith("]"):
        flags, bracket, paths = rest.partition("[")
        return [*shlex.split(flags), *(str(word) for word in json.loads(bracket + paths))]
    return shlex.split(rest)


def _is_glob(source: str) -> bool:
    return any(ch in source for ch in "*?[")


def _excluded(relative: PurePosixPath) -> bool:
    return any(part in _EXCLUDED_PARTS or part.endswith(_EXCLUDED_SUFFIXES) for part in relative.parts)


def _files_under(root: Path, path: Path) -> Iterable[str]:
    relative = PurePosixPath(path.relative_to(root).as_posix())
    if _excluded(relative):
        return []
    if path.is_file():
        return [str(relative)]
    if not path.is_dir():
        return []
    found: list[str] = []
    for child in path.rglob("*"):
        child_relative = PurePosixPath(child.relative_to(root).as_posix())
        if child.is_file() and not _excluded(child_relative):
            found.append(str(child_relative))
    return found


def _read(root: Path, path: str) -> ContextFile:
    file = root / path
    return ContextFile(path=path, executable=bool(file.stat().st_mode & 0o111), data=file.read_bytes())
