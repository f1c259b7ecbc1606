"""``speakwire ui``: a Gradio page that speaks through a speakwire server or a SageMaker endpoint."""

from __future__ import annotations

import argparse
import os
import sys

from speakwire.ui.backend import DEFAULT_URL, SpeechBackend


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ui", help="Open a web page that streams speech from a server or SageMaker endpoint.",
                       description="Needs the [ui] extra (gradio).")  # fmt: skip
    p.add_argument("--url", default=DEFAULT_URL, help=f"speakwire server to speak through (default {DEFAULT_URL}).")
    p.add_argument("--api-key", help="API key, if the server (or the endpoint's container) requires one.")
    # --endpoint-name and --server-port are the AWS sample's spellings, kept for people coming from it.
    p.add_argument("--sagemaker-endpoint", "--endpoint-name", dest="sagemaker_endpoint", metavar="NAME",
                   help="Speak through this SageMaker endpoint (bidirectional stream) instead of --url.")  # fmt: skip
    p.add_argument("--region", help="AWS region of the endpoint (default $AWS_REGION, then us-east-1).")
    p.add_argument("--host", default="127.0.0.1", help="Interface to serve the page on (default 127.0.0.1).")
    p.add_argument("--port", "--server-port", dest="port", type=int, default=6006,
                   help="Port to serve the page on (default 6006).")  # fmt: skip
    p.add_argument(
        "--share",
        action="store_true",
        help="Also publish the page on a public gradio.live link; anyone with it can use your server.",
    )
    p.set_defaults(func=run)


def backend_for(args: argparse.Namespace) -> SpeechBackend:
    """The backend the flags ask for: a SageMaker endpoint when one is named, else the server at ``--url``."""
    if args.sagemaker_endpoint:
        # Imported only here: the deploy tooling is not needed to talk to a plain server.
        from speakwire.deploy.sagemaker.bidi import load_bidi_sdk
        from speakwire.deploy.sagemaker.settings import resolve_region

        region = resolve_region(args.region, os.environ)
        load_bidi_sdk()  # fail now, in the terminal, rather than on the first Speak in the browser
        return SpeechBackend.for_sagemaker(args.sagemaker_endpoint, region=region, api_key=args.api_key)
    return SpeechBackend.for_server(args.url, api_key=args.api_key)


def run(args: argparse.Namespace) -> int:
    from speakwire.errors import MissingExtraError
    from speakwire.ui.app import build_ui, launch_ui

    try:
        backend = backend_for(args)
        blocks = build_ui(backend)
    except (MissingExtraError, ValueError) as exc:  # ValueError: an invalid --region
        print(exc, file=sys.stderr)
        return 2
    local_url, public_url = launch_ui(blocks, host=args.host, port=args.port, share=args.share)
    print(f"speakwire ui: open {local_url} to speak through {backend.target}", flush=True)
    if public_url:
        print(f"public link (anyone who has it can use the server): {public_url}", flush=True)
    blocks.block_thread()  # until Ctrl-C
    return 0
