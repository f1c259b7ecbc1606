"""build_context: the files the Dockerfile copies, a byte-stable zip, and a tag that follows the content."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

from speakwire.deploy.sagemaker.build_context import BuildContextError, collect, copy_sources, mirrored_base_images

REPO = Path(__file__).parents[2]

DOCKERFILE = """\
FROM python:3.11-slim AS build
WORKDIR /src
# README* so the build works either way
COPY pyproject.toml README* ./
COPY --chown=1000:1000 src ./src
COPY --from=build /wheels /wheels
ADD ["deploy/sagemaker/entrypoint.sh", \\
     "/usr/local/bin/speakwire-entrypoint"]
RUN pip install .
"""


def make_tree(root: Path) -> None:
    (root / "deploy" / "sagemaker").mkdir(parents=True)
    (root / "deploy" / "sagemaker" / "Dockerfile.cpu").write_text(DOCKERFILE)
    entrypoint = root / "deploy" / "sagemaker" / "entrypoint.sh"
    entrypoint.write_text("#!/bin/sh\nexec speakwire serve --sagemaker\n")
    entrypoint.chmod(0o755)
    (root / "deploy" / "sagemaker" / "README.md").write_text("guide, not copied\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "README.md").write_text("readme\n")
    package = root / "src" / "speakwire"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0cache")
    (root / "src" / "speakwire.egg-info").mkdir()
    (root / "src" / "speakwire.egg-info" / "PKG-INFO").write_text("x")
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("")


def test_copy_sources_reads_shell_and_json_forms_and_skips_stage_copies() -> None:
    assert copy_sources(DOCKERFILE) == ["pyproject.toml", "README*", "src", "deploy/sagemaker/entrypoint.sh"]


def test_a_source_with_a_variable_cannot_be_resolved_statically() -> None:
    with pytest.raises(BuildContextError, match=r"\$APP"):
        copy_sources("FROM x\nCOPY $APP /app\n")


def test_the_context_holds_what_the_dockerfile_copies_and_no_caches(tmp_path: Path) -> None:
    make_tree(tmp_path)

    context = collect(tmp_path, "cpu")

    assert [f.path for f in context.files] == [
        "README.md",
        "deploy/sagemaker/Dockerfile.cpu",
        "deploy/sagemaker/entrypoint.sh",
        "pyproject.toml",
        "src/speakwire/__init__.py",
    ]
    assert context.executables == ("deploy/sagemaker/entrypoint.sh",)
    with zipfile.ZipFile(io.BytesIO(context.zip_bytes())) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        assert list(infos) == [f.path for f in context.files]
        assert {info.date_time for info in infos.values()} == {(1980, 1, 1, 0, 0, 0)}
        assert infos["deploy/sagemaker/entrypoint.sh"].external_attr >> 16 == 0o100755
        assert infos["pyproject.toml"].external_attr >> 16 == 0o100644


def test_the_zip_and_tag_do_not_depend_on_timestamps_or_creation_order(tmp_path: Path) -> None:
    make_tree(tmp_path)
    first = collect(tmp_path, "cpu")
    for path in tmp_path.rglob("*"):
        os.utime(path, (1_000_000_000, 1_000_000_000))

    second = collect(tmp_path, "cpu")

    assert second.zip_bytes() == first.zip_bytes()
    assert second.tag == first.tag and second.tag.startswith("cpu-") and len(second.tag) == 20


def test_the_tag_changes_with_a_source_file_a_mode_or_a_build_arg_but_not_with_an_uncopied_file(
    tmp_path: Path,
) -> None:
    make_tree(tmp_path)
    tag = collect(tmp_path, "cpu").tag
    (tmp_path / "tests" / "test_y.py").write_text("not in the image")
    (tmp_path / "deploy" / "sagemaker" / "README.md").write_text("edited guide")
    assert collect(tmp_path, "cpu").tag == tag

    assert collect(tmp_path, "cpu", build_args={"BASE_IMAGE": "public.ecr.aws/x"}).tag != tag
    (tmp_path / "pyproject.toml").chmod(0o755)
    assert collect(tmp_path, "cpu").tag != tag
    (tmp_path / "pyproject.toml").chmod(0o644)
    (tmp_path / "src" / "speakwire" / "__init__.py").write_text("VERSION = 2\n")
    assert collect(tmp_path, "cpu").tag != tag


def test_a_missing_source_is_an_error_but_an_unmatched_glob_is_not(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "README.md").unlink()
    assert "README.md" not in [f.path for f in collect(tmp_path, "cpu").files]

    (tmp_path / "pyproject.toml").unlink()
    with pytest.raises(BuildContextError, match=r"pyproject\.toml"):
        collect(tmp_path, "cpu")


def test_both_real_dockerfiles_resolve_to_a_context_with_the_package_and_the_entrypoint() -> None:
    for variant in ("cpu", "cuda"):
        context = collect(REPO, variant)
        paths = {f.path for f in context.files}
        assert {f"deploy/sagemaker/Dockerfile.{variant}", "deploy/sagemaker/entrypoint.sh", "pyproject.toml"} <= paths
        assert "src/speakwire/cli/main.py" in paths
        assert not any("__pycache__" in p or p.startswith("tests/") for p in paths)
        assert context.tag.startswith(f"{variant}-")


@pytest.mark.parametrize(
    ("dockerfile", "given", "expected"),
    [
        (
            "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE} AS build\nFROM $BASE_IMAGE\n",
            {},
            {"BASE_IMAGE": "public.ecr.aws/docker/library/python:3.11-slim"},
        ),
        (
            "ARG B=docker.io/library/debian:bookworm\nFROM ${B}\n",
            {},
            {"B": "public.ecr.aws/docker/library/debian:bookworm"},
        ),
        ("ARG B=python:3.11\nFROM ${B}\n", {"B": "mine"}, {}),  # the user's own choice wins
        ("ARG B=nvidia/cuda:12.8.1-runtime-ubuntu24.04\nFROM ${B}\n", {}, {}),  # not an official image
        ("ARG B=ghcr.io/org/img:1\nFROM ${B}\n", {}, {}),  # another registry
        ("ARG B=python:3.11\nFROM python:3.11\n", {}, {}),  # declared but not the base
        ("FROM python:3.11\nARG B=python:3.11\nFROM ${B}\n", {}, {}),  # declared after FROM: a stage arg
    ],
)
def test_only_official_docker_hub_bases_given_by_arg_are_mirrored(
    dockerfile: str, given: dict[str, str], expected: dict[str, str]
) -> None:
    assert mirrored_base_images(dockerfile, given) == expected
