"""``speakwire sagemaker deploy|smoke|invoke|status|delete|local``: thin wrappers over ``speakwire.deploy.sagemaker``.

boto3 (the ``[sagemaker]`` extra) and the bidirectional-stream SDK (``[sagemaker-bidi]``,
Python ≥ 3.12) are imported only when a command runs, so ``speakwire --help`` works
without them and a missing one fails with the pip command that installs it.

Exit codes: 0 success; 1 the operation failed (smoke test, endpoint, or resources left
behind by ``delete``); 2 invalid options or a missing dependency, before any AWS call.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from speakwire.errors import MissingExtraError

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def register(subparsers: Any) -> None:
    """Add ``sagemaker`` and its actions to the top-level parser."""
    from speakwire.deploy.sagemaker import settings as s
    from speakwire.deploy.sagemaker import smoke

    parser = subparsers.add_parser(
        "sagemaker",
        help="deploy to, test and delete Amazon SageMaker AI endpoints",
        description="Deploy a TTS endpoint on Amazon SageMaker AI, test it, and clean it up.",
    )
    actions = parser.add_subparsers(dest="sagemaker_action", required=True, metavar="ACTION")

    deploy = actions.add_parser(
        "deploy",
        help="create model, endpoint config and endpoint; smoke-test; keep or delete",
        description="Creates the endpoint, waits for InService, runs the streaming smoke test, then deletes "
        "everything unless --keep-endpoint is given and the smoke test passed. Billing runs until deletion. "
        "The image is speakwire's own for the engine (built with CodeBuild first when ECR lacks it) unless "
        "--image dlc or --image-uri says otherwise.",
    )
    deploy.add_argument("--endpoint-name", help="name for model, config and endpoint (default speakwire-<unix time>)")
    _add_region(deploy)
    deploy.add_argument(
        "--instance-types",
        nargs="+",
        metavar="TYPE",
        help="1-5 instance pools, highest priority first; quota is needed for each (default: qwen3 "
        f"{' '.join(s.GPU_INSTANCE_TYPES)}; piper {' '.join(s.CPU_INSTANCE_TYPES)})",
    )
    deploy.add_argument(
        "--engine",
        choices=s.ENGINES,
        help=f"qwen3 (GPU pools, inference AMI) or piper (CPU pools) (default: {s.DEFAULT_ENGINE})",
    )
    deploy.add_argument(
        "--image",
        choices=s.IMAGE_SOURCES,
        default="speakwire",
        help="speakwire: our image for the engine, built if ECR lacks it; dlc: the vLLM-Omni DLC "
        "(default: %(default)s)",
    )
    deploy.add_argument("--role", help=f"execution role ARN (default ${s.ROLE_ENV})")
    deploy.add_argument("--image-uri", help="serving image; overrides --image")
    deploy.add_argument("--model-id", help=f"SM_VLLM_MODEL, qwen3 only (default: {s.DEFAULT_MODEL_ID})")
    deploy.add_argument("--gpu-memory-utilization", type=float, help="SM_VLLM_GPU_MEMORY_UTILIZATION, e.g. 0.45")
    deploy.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra container variable (SPEAKWIRE_*, SM_VLLM_*); repeatable",
    )
    deploy.add_argument(
        "--provision-timeout",
        type=int,
        default=s.DEFAULT_PROVISION_TIMEOUT_S,
        metavar="SECONDS",
        help="per-pool provisioning timeout before falling back to the next pool (default: %(default)s)",
    )
    deploy.add_argument(
        "--ami-version", help=f"InferenceAmiVersion (default: {s.DEFAULT_AMI_VERSION} for qwen3, none for piper)"
    )
    deploy.add_argument(
        "--keep-endpoint", action="store_true", help="keep the endpoint running if the smoke test passes"
    )
    deploy.add_argument("--min-instances", type=int, help="autoscaling floor (default 1 with autoscaling)")
    deploy.add_argument("--max-instances", type=int, help="autoscaling ceiling; turns autoscaling on")
    deploy.add_argument(
        "--target-streams",
        type=float,
        help="autoscaling target, concurrent requests (open streams) per instance "
        "(default: --target-share of the capacity the image reports in /ready)",
    )
    deploy.add_argument(
        "--target-share", type=float, help=f"share of the reported capacity (default {s.DEFAULT_TARGET_SHARE:g})"
    )
    deploy.add_argument(
        "--voices-url",
        metavar="s3://BUCKET/PREFIX",
        help="the voice library every instance shares (default: s3://speakwire-voices-<account>-<region>/"
        "<endpoint name>, the bucket created if missing); kept when the endpoint is deleted",
    )
    deploy.add_argument(
        "--no-voice-library",
        action="store_true",
        help="no shared voice library: saved voices stay on the instance that saved them",
    )
    _add_build_options(deploy)
    _add_smoke_options(deploy, smoke)
    deploy.set_defaults(func=run_deploy)

    smoke_parser = actions.add_parser("smoke", help="run the streaming smoke test against an existing endpoint")
    _add_endpoint_name(smoke_parser)
    _add_region(smoke_parser)
    _add_endpoint_url(smoke_parser, "bidirectional-stream endpoint, https:// only (default: the region's, port 8443)")
    _add_smoke_options(smoke_parser, smoke)
    smoke_parser.set_defaults(func=run_smoke_command)

    invoke = actions.add_parser(
        "invoke",
        help="one /v1/audio/speech request through InvokeEndpoint; voice cloning with --ref-audio",
    )
    _add_endpoint_name(invoke)
    _add_region(invoke)
    _add_endpoint_url(invoke, "runtime endpoint, e.g. http://127.0.0.1:8090 for speakwire sagemaker local")
    invoke.add_argument("--text", required=True, help="what to say")
    invoke.add_argument("--ref-audio", type=Path, metavar="FILE", help="reference clip to clone (any format, 1-30 s)")
    invoke.add_argument("--ref-text", help="transcript of the reference clip")
    invoke.add_argument("--voice", help="built-in speaker when there is no --ref-audio (e.g. Vivian)")
    invoke.add_argument("--language", default="English", help="language name (default: %(default)s)")
    invoke.add_argument("--output", type=Path, default=Path("speech.wav"), help="WAV to write (default: %(default)s)")
    invoke.add_argument(
        "--stream",
        action="store_true",
        help="use InvokeEndpointWithResponseStream and report time to first byte",
    )
    invoke.set_defaults(func=run_invoke)

    status = actions.add_parser("status", help="show endpoint status, landed instance pool, config and model")
    _add_endpoint_name(status)
    _add_region(status)
    status.set_defaults(func=run_status)

    delete = actions.add_parser(
        "delete", help="delete endpoint, endpoint config and model; exits 1 if anything is left"
    )
    _add_endpoint_name(delete)
    _add_region(delete)
    delete.add_argument(
        "--delete-voices",
        action="store_true",
        help="also delete the endpoint's voice library in S3, every saved voice in it (kept by default; only "
        "once the endpoint is gone; do not use it while another endpoint shares the library)",
    )
    delete.set_defaults(func=run_delete)

    _register_build(actions)
    _register_local(actions)


def _register_build(actions: Any) -> None:
    build = actions.add_parser(
        "build",
        help="build and push speakwire's image with AWS CodeBuild (no local Docker)",
        description="Zips the build context the Dockerfile needs, and unless ECR already holds the image tagged by "
        "the context's hash, builds it on CodeBuild and pushes it; the temporary project and the context object "
        "are deleted however the build ends. Prints the image URI.",
    )
    build.add_argument(
        "--variant",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cpu: Piper (Dockerfile.cpu); cuda: Qwen3-TTS (Dockerfile.cuda) (default: %(default)s)",
    )
    _add_region(build)
    _add_build_options(build)
    build.add_argument(
        "--dry-run", action="store_true", help="print the context's files, the tag and the buildspec; no AWS call"
    )
    build.set_defaults(func=run_build)


def _add_build_options(parser: argparse.ArgumentParser) -> None:
    from speakwire.deploy.sagemaker import build_requests as br

    parser.add_argument(
        "--repository", default=br.DEFAULT_REPOSITORY, help="ECR repository, created if missing (default: %(default)s)"
    )
    parser.add_argument(
        "--bucket",
        help="S3 bucket for the build context (default: speakwire-build-<account>-<region>, created if missing)",
    )
    parser.add_argument(
        "--codebuild-role-arn",
        metavar="ARN",
        help=f"CodeBuild service role, needed when a build runs (default ${br.CODEBUILD_ROLE_ENV})",
    )
    parser.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="docker build --build-arg, e.g. BASE_IMAGE=...; part of the image tag; repeatable",
    )
    parser.add_argument(
        "--context-dir",
        type=Path,
        metavar="DIR",
        help="speakwire checkout to build from (default: the current directory or its parents)",
    )
    parser.add_argument(
        "--no-base-mirror",
        action="store_true",
        help="pull ARG-given official base images from Docker Hub, not its ECR Public mirror",
    )


def _register_local(actions: Any) -> None:
    from speakwire.deploy.sagemaker import local_runtime as lr

    local = actions.add_parser(
        "local",
        help="a local SageMaker runtime in front of a local server, for boto3 code and our commands",
        description="Serves the SageMaker runtime's InvokeEndpoint and InvokeEndpointWithResponseStream as boto3 "
        "calls them, forwarding each call to a container's /invocations (e.g. speakwire serve --sagemaker). "
        f"Point boto3 at it with {lr.ENDPOINT_URL_ENV}; any credentials are accepted.",
    )
    local.add_argument(
        "--container-url",
        default=lr.DEFAULT_CONTAINER_URL,
        help="the container's base URL; /invocations is appended (default: %(default)s)",
    )
    local.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    local.add_argument("--port", type=int, default=lr.DEFAULT_PORT, help="port to listen on (default: %(default)s)")
    local.add_argument("--endpoint-name", help="the only endpoint name that answers (default: any name)")
    local.add_argument(
        "--region",
        default=lr.DEFAULT_REGION,
        help="region named in errors when a request's signature names none (default: %(default)s)",
    )
    local.add_argument(
        "--max-part-bytes",
        type=int,
        metavar="BYTES",
        help="cut response-stream payload parts to at most this size (default: as the container sends)",
    )
    local.add_argument(
        "--invocation-timeout",
        type=float,
        default=lr.DEFAULT_INVOCATION_TIMEOUT_S,
        metavar="SECONDS",
        help="how long the container may stay silent before the call fails (default: %(default)s)",
    )
    local.set_defaults(func=run_local)


def _add_endpoint_name(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--endpoint-name", required=True, help="endpoint (and config and model) name")


def _add_endpoint_url(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--endpoint-url", metavar="URL", help=f"{what}; default $AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME")


def _add_region(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--region", help="AWS region (default $AWS_REGION, then us-east-1)")


def _add_smoke_options(parser: argparse.ArgumentParser, smoke: Any) -> None:
    parser.add_argument("--text", default=smoke.DEFAULT_TEXT, help="smoke-test sentence")
    parser.add_argument("--voice", default=smoke.DEFAULT_VOICE, help="speaker (default: %(default)s)")
    parser.add_argument("--language", default=smoke.DEFAULT_LANGUAGE, help="language (default: %(default)s)")
    parser.add_argument(
        "--output",
        type=Path,
        default=smoke.DEFAULT_OUTPUT,
        help="WAV of the smoke-test audio (default: %(default)s)",
    )
    parser.add_argument(
        "--smoke-timeout",
        type=float,
        default=smoke.DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help="deadline for the whole smoke test (default: %(default)s)",
    )
    parser.add_argument(
        "--model-invocation-path",
        default="v1/audio/speech/stream",
        help="container WebSocket path for the bidirectional stream (default: %(default)s)",
    )


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


class _CommandFailed(Exception):
    """Ends a ``_command``: ``error: <message>`` on stderr, ``code`` its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


Command = Callable[[argparse.Namespace], int]


def _command(run: Command) -> Command:
    """A command whose steps end it by raising ``_CommandFailed`` (``_exits``): said on stderr, its code returned."""

    @functools.wraps(run)
    def command(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except _CommandFailed as exc:
            return _fail(str(exc), exc.code)

    return command


@contextmanager
def _exits(code: int, *errors: type[BaseException], say: Callable[[BaseException], str] = str) -> Iterator[None]:
    """Around one step of a ``_command``: any of ``errors`` ends the command with ``code``, ``say(error)`` said."""
    try:
        yield
    except errors as exc:
        raise _CommandFailed(say(exc), code) from exc


def _then(outcome: str) -> Callable[[BaseException], str]:
    """``say`` for ``_exits``: the error, then what it means for the run (``; nothing was created``)."""
    return lambda exc: f"{exc}; {outcome}"


def _interrupted(outcome: str) -> Callable[[BaseException], str]:
    """``say`` for ``_exits`` on Ctrl-C (``KeyboardInterrupt`` says nothing itself)."""
    return lambda _: f"interrupted; {outcome}"


def _session(boto3: Any, region: str) -> Any:
    """A boto3 session that has credentials; without any, exit 2 before anything is created."""
    session = boto3.Session(region_name=region)
    if session.get_credentials() is None:
        raise _CommandFailed(
            "no AWS credentials found (environment, ~/.aws, SSO or instance role); nothing was created", EXIT_USAGE
        )
    return session


def _build_image(session: Any, context: Any, request: Any, *, outcome: str | None = None) -> Any:
    """``build_image`` as a step: a failed build exits 1, Ctrl-C 130; ``outcome`` says what that means for the run."""
    from speakwire.deploy.sagemaker.build import BuildClients, BuildError, build_image

    # ``build`` says what it said before the wrapper; deploy also says what the stop means for its run.
    stopped = (
        f"the build was stopped and what it made deleted (see above); {outcome}"
        if outcome
        else "the build was stopped and its project and context deleted (see above)"
    )
    failed = _exits(EXIT_FAILED, BuildError, say=_then(outcome) if outcome else str)
    with failed, _exits(EXIT_INTERRUPTED, KeyboardInterrupt, say=_interrupted(stopped)):
        return build_image(BuildClients.from_session(session), context, request)


def _boto3() -> Any:
    try:
        import boto3
    except ImportError as exc:
        raise MissingExtraError("sagemaker", "boto3") from exc
    return boto3


def _region(args: argparse.Namespace) -> str:
    from speakwire.deploy.sagemaker.settings import resolve_region

    return resolve_region(args.region, os.environ)


def _region_and_boto3(args: argparse.Namespace) -> tuple[str, Any]:
    """The region and boto3, before any AWS call; a bad region or a missing extra exits 2."""
    with _exits(EXIT_USAGE, MissingExtraError, ValueError):
        return _region(args), _boto3()


def _aws_errors() -> tuple[type[BaseException], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def _endpoint_smoke(args: argparse.Namespace, region: str) -> Callable[[str], Any]:
    """A function running the streaming smoke test against an endpoint over the bidirectional stream."""
    from speakwire.deploy.sagemaker.bidi import SageMakerBidiTransport
    from speakwire.deploy.sagemaker.smoke import SmokeResult, run_smoke

    async def smoke_async(endpoint_name: str) -> SmokeResult:
        transport = await SageMakerBidiTransport.connect(
            endpoint_name,
            region=region,
            model_invocation_path=args.model_invocation_path,
            endpoint_uri=getattr(args, "endpoint_uri", None),  # deploy's smoke goes to the endpoint it made
        )
        return await run_smoke(
            transport,
            text=args.text,
            voice=args.voice,
            language=args.language,
            output_path=args.output,
            timeout_s=args.smoke_timeout,
        )

    def smoke(endpoint_name: str) -> SmokeResult:
        return asyncio.run(smoke_async(endpoint_name))

    return smoke


@_command
def run_deploy(args: argparse.Namespace) -> int:
    from speakwire.deploy.sagemaker.bidi import load_bidi_sdk
    from speakwire.deploy.sagemaker.build_context import BuildContextError
    from speakwire.deploy.sagemaker.build_requests import BuildSettingsError
    from speakwire.deploy.sagemaker.settings import DeploySettingsError, build_settings
    from speakwire.deploy.sagemaker.smoke import DEFAULT_VOICE

    usage_errors = (DeploySettingsError, BuildSettingsError, BuildContextError, MissingExtraError, ValueError)
    with _exits(EXIT_USAGE, *usage_errors, say=_then("nothing was created")):
        settings = build_settings(
            endpoint_name=args.endpoint_name,
            region=args.region,
            role_arn=args.role,
            image_uri=args.image_uri,
            image=args.image,
            engine=args.engine,
            instance_types=args.instance_types,
            model_id=args.model_id,
            gpu_memory_utilization=args.gpu_memory_utilization,
            env_assignments=args.env,
            provision_timeout_s=args.provision_timeout,
            ami_version=args.ami_version,
            keep_endpoint=args.keep_endpoint,
            min_instances=args.min_instances,
            max_instances=args.max_instances,
            target_streams=args.target_streams,
            target_share=args.target_share,
            voices_url=args.voices_url,
            voice_library=not args.no_voice_library,
        )
        # Our image's build inputs are checked now too, not after the endpoint's first minutes.
        build_inputs = _build_inputs(args, settings.region, settings.variant) if settings.image == "speakwire" else None
        boto3 = _boto3()
        # The smoke test needs the bidirectional client; find out now, not after paying for an endpoint.
        load_bidi_sdk()
        args.model_invocation_path = _invocation_path(args.model_invocation_path)
    if settings.engine == "piper" and args.voice == DEFAULT_VOICE:
        args.voice = None  # Vivian is a Qwen3 speaker: Piper's smoke test speaks with its own default voice

    from speakwire.deploy.sagemaker.deploy import deploy

    session = _session(boto3, settings.region)
    if settings.voice_library:  # first: a bucket that cannot be used fails in seconds, not after a build
        settings = _voice_library(session, settings)
    if build_inputs is not None:
        build_request, context = build_inputs
        image = _build_image(session, context, build_request, outcome="no endpoint was created")
        settings = settings.with_image(image.image_uri)
    derive_target = settings.autoscaling is not None and settings.autoscaling.target_streams is None
    deleted = _interrupted("what this run created has been deleted (see above)")
    with _exits(EXIT_FAILED, *_aws_errors(), say=_aws_failure), _exits(EXIT_INTERRUPTED, KeyboardInterrupt,
                                                                        say=deleted):  # fmt: skip
        result = deploy(
            session.client("sagemaker"),
            settings,
            smoke=_endpoint_smoke(args, settings.region),
            autoscaling_client=session.client("application-autoscaling") if settings.autoscaling else None,
            runtime_client=session.client("sagemaker-runtime") if derive_target else None,
        )
    if result.cleanup is not None and not result.cleanup.ok:
        left = ", ".join(d.resource for d in result.cleanup.left)
        print(
            f"WARNING: could not delete {left}; run: speakwire sagemaker delete "
            f"--endpoint-name {settings.endpoint_name} --region {settings.region}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if not result.ok:
        return _fail(result.reason, EXIT_FAILED)
    return 0


def _voice_library(session: Any, settings: Any) -> Any:
    """The endpoint's shared voice library, its bucket checked (or created) before any endpoint exists."""
    from speakwire.deploy.sagemaker.voice_library import VoiceLibraryError, describe, prepare_voice_library

    with _exits(EXIT_FAILED, VoiceLibraryError, say=_then("no endpoint was created")):
        plan = prepare_voice_library(
            session.client("s3"),
            session.client("sts"),
            region=settings.region,
            endpoint_name=settings.endpoint_name,
            voices_url=settings.voices_url,
        )
    print(describe(plan))
    return settings.with_voice_library(plan.environment)


def _aws_failure(exc: BaseException) -> str:
    """The error, with the IAM action named first when the call was refused."""
    from speakwire.deploy.sagemaker.aws_errors import refused_permission

    operation = str(getattr(exc, "operation_name", ""))
    service = "application-autoscaling" if operation.endswith(("ScalableTarget", "ScalingPolicy")) else "sagemaker"
    action = refused_permission(exc, service)
    return f"access denied: the caller needs {action}; {exc}" if action else str(exc)


def _invocation_path(path: str) -> str:
    from speakwire.deploy.sagemaker.bidi import normalize_invocation_path

    return normalize_invocation_path(path)


@_command
def run_smoke_command(args: argparse.Namespace) -> int:
    from speakwire.client.transport import TransportClosed

    with _exits(EXIT_USAGE, MissingExtraError, ValueError):
        region = _region(args)
        args.model_invocation_path = _invocation_path(args.model_invocation_path)
        from speakwire.deploy.sagemaker.bidi import bidi_endpoint_override, load_bidi_sdk

        args.endpoint_uri = bidi_endpoint_override(args.endpoint_url, os.environ)
        load_bidi_sdk()
    with _exits(EXIT_FAILED, TransportClosed, RuntimeError):
        result = _endpoint_smoke(args, region)(args.endpoint_name)
    print(result.summary())
    return 0 if result.ok else EXIT_FAILED


@_command
def run_invoke(args: argparse.Namespace) -> int:
    region, boto3 = _region_and_boto3(args)
    from speakwire.deploy.sagemaker.invoke import invoke
    from speakwire.deploy.sagemaker.reference_audio import ReferenceAudioError
    from speakwire.deploy.sagemaker.speech_response import SpeechResponseError

    # Without --endpoint-url, boto3 itself reads $AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME.
    client = boto3.Session(region_name=region).client("sagemaker-runtime", endpoint_url=args.endpoint_url)
    failures: tuple[type[BaseException], ...] = (SpeechResponseError, ValueError, *_aws_errors())
    # The inner step is asked first: a ReferenceAudioError is also a ValueError, and it is the caller's to fix.
    with _exits(EXIT_FAILED, *failures), _exits(EXIT_USAGE, ReferenceAudioError, OSError):
        invoke(
            client,
            args.endpoint_name,
            text=args.text,
            output=args.output,
            ref_audio_path=args.ref_audio,
            ref_text=args.ref_text,
            voice=args.voice,
            language=args.language,
            stream=args.stream,
        )
    return 0


@_command
def run_status(args: argparse.Namespace) -> int:
    region, boto3 = _region_and_boto3(args)
    from speakwire.deploy.sagemaker.status import status

    with _exits(EXIT_FAILED, *_aws_errors()):
        report = status(boto3.Session(region_name=region).client("sagemaker"), args.endpoint_name)
    for line in report.lines():
        print(line)
    return 0 if report.endpoint_status is not None else EXIT_FAILED


@_command
def run_delete(args: argparse.Namespace) -> int:
    region, boto3 = _region_and_boto3(args)
    from speakwire.deploy.sagemaker.delete import delete

    session = boto3.Session(region_name=region)
    sm = session.client("sagemaker")
    library = _library_to_delete(sm, args.endpoint_name) if args.delete_voices else None
    result = delete(sm, args.endpoint_name)
    if library is not None:
        if not result.ok:
            return _fail(f"the voice library {library.location.url} was kept: the endpoint is not gone", EXIT_FAILED)
        from speakwire.deploy.sagemaker.voice_library import VoiceLibraryError, delete_library

        with _exits(EXIT_FAILED, VoiceLibraryError):
            delete_library(session.client("s3"), library)
    return 0 if result.ok else EXIT_FAILED


def _library_to_delete(sm: Any, endpoint_name: str) -> Any:
    """The library ``deploy`` recorded in the endpoint's model (read before the model is deleted), or None."""
    from speakwire.deploy.sagemaker.voice_library import VoiceLibraryError, recorded_library

    with _exits(EXIT_FAILED, VoiceLibraryError, say=_then("nothing was deleted")):
        library = recorded_library(sm, endpoint_name)
    if library is None:
        print(f"{endpoint_name} has no voice library (deployed with --no-voice-library or before it existed)")
    return library


def _build_inputs(args: argparse.Namespace, region: str, variant: str) -> tuple[Any, Any]:
    """The validated build request and the build context; no AWS call."""
    from speakwire.deploy.sagemaker import build_context as bc
    from speakwire.deploy.sagemaker.build_requests import build_request

    request = build_request(
        region, repository=args.repository, bucket=args.bucket, role_arn=args.codebuild_role_arn, environ=os.environ
    )
    package_checkout = Path(__file__).resolve().parents[3]  # src/speakwire/cli → the checkout, for editable installs
    root = bc.find_root(args.context_dir or Path.cwd(), None if args.context_dir else package_checkout)
    build_args = bc.parse_build_args(args.build_arg)
    if not args.no_base_mirror:
        dockerfile = (root / bc.dockerfile_path(variant)).read_text()  # type: ignore[arg-type]
        for name, image in bc.mirrored_base_images(dockerfile, build_args).items():
            print(f"build arg {name}={image} (Docker Hub's official image from ECR Public; --no-base-mirror: Hub)")
            build_args[name] = image
    context = bc.collect(root, variant, build_args=build_args)  # type: ignore[arg-type]
    return request, context


@_command
def run_build(args: argparse.Namespace) -> int:
    from speakwire.deploy.sagemaker.build_context import BuildContextError
    from speakwire.deploy.sagemaker.build_requests import BuildSettingsError

    usage_errors = (BuildSettingsError, BuildContextError, MissingExtraError, ValueError)
    with _exits(EXIT_USAGE, *usage_errors, say=_then("nothing was created")):
        region = _region(args)
        request, context = _build_inputs(args, region, args.variant)
        if args.dry_run:
            return _print_build_plan(context, request)
        boto3 = _boto3()
    image = _build_image(_session(boto3, region), context, request)
    print(image.image_uri)
    return 0


def _print_build_plan(context: Any, request: Any) -> int:
    from speakwire.deploy.sagemaker.build_requests import buildspec, make_plan

    plan = make_plan(context, request, account="<account>", started=0)
    body = context.zip_bytes()
    for item in context.files:
        print(f"{'755' if item.executable else '644'} {len(item.data):>8} {item.path}")
    print(f"{len(context.files)} files, zip {len(body)} bytes, context sha256 {context.digest}")
    print(f"image {plan.image_uri}")
    print("buildspec:")
    print(buildspec(plan), end="")
    return 0


@_command
def run_local(args: argparse.Namespace) -> int:
    from speakwire.deploy.sagemaker.local_runtime import LocalRuntimeConfig, how_to_use, serve_local_runtime

    with _exits(EXIT_USAGE, ValueError):
        config = LocalRuntimeConfig(
            container_url=args.container_url,
            endpoint_name=args.endpoint_name,
            region=args.region,
            max_part_bytes=args.max_part_bytes,
            invocation_timeout_s=args.invocation_timeout,
        )
    print(how_to_use(config, host=args.host, port=args.port), flush=True)
    serve_local_runtime(config, host=args.host, port=args.port)  # uvicorn handles Ctrl-C and SIGTERM
    return 0
