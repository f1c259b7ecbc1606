"""``speakwire voices``: manage saved voices in a local data dir or on a running server.

    speakwire voices add NAME --audio ref.m4a --consent "..." [--text "..."] [--description ...] [--language ...]
    speakwire voices list [--json]
    speakwire voices rm NAME
    speakwire voices export NAME [-o NAME.swv]
    speakwire voices import FILE [--name NEW]

Without ``--url`` the library in ``--data-dir`` (default ``$SPEAKWIRE_DATA_DIR`` or the
per-user data dir) is changed directly; with ``--voices-url s3://bucket/prefix`` (or
``$SPEAKWIRE_VOICES_URL``) the shared library in S3 that an endpoint's instances use, with
this machine's AWS credentials (a voice added here speaks on every instance at once);
with ``--url`` (and ``--api-key``) the server's API is used, e.g. to ship a voice made
locally to a running endpoint.

Shipping a voice:
  to a running server:  speakwire voices import jane.swv --url https://host --api-key KEY
  to a SageMaker endpoint: POST /invocations, X-Amzn-SageMaker-Custom-Attributes:
      route=/v1/audio/voices/import, body {"file": "<base64 of jane.swv>"}
  into a container image, at build time (the library is plain files; set the same dir at run time):
      ENV SPEAKWIRE_DATA_DIR=/opt/speakwire/data
      COPY jane.swv /tmp/jane.swv
      RUN speakwire voices import /tmp/jane.swv && rm /tmp/jane.swv
  A .swv exported from a server carries the clone prompts it computed; one from a local library
  gets its prompt on first use (then kept).
"""

from __future__ import annotations

import argparse
import json
import mimetypes
import os
import sys
import time
from pathlib import Path
from typing import Any

from speakwire.errors import MissingExtraError, SpeakwireError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "voices",
        help="Save, list, delete, export and import cloned voices.",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("--data-dir", help="Local library (default: $SPEAKWIRE_DATA_DIR or ~/.local/share/speakwire).")
    where.add_argument("--url", help="A running server instead, e.g. http://127.0.0.1:8000.")
    where.add_argument(
        "--voices-url",
        default=os.environ.get("SPEAKWIRE_VOICES_URL") or None,
        metavar="s3://BUCKET/PREFIX",
        help="The shared library in S3 (default $SPEAKWIRE_VOICES_URL); --data-dir then holds its cache.",
    )
    where.add_argument("--api-key", default=os.environ.get("SPEAKWIRE_API_KEY"), help="Bearer key for --url.")
    actions = p.add_subparsers(dest="voices_command", required=True, metavar="ACTION")

    add = actions.add_parser("add", parents=[where], help="Save a voice from a reference clip (1–30 s).")
    add.add_argument("name", help="Voice name: letters, digits, '-', '_', '.'; up to 64 characters.")
    add.add_argument("--audio", required=True, help="Reference clip: WAV, FLAC, MP3, OGG/Opus, M4A/AAC or WebM.")
    add.add_argument("--consent", required=True, help="Who recorded it and that they agreed to its cloning.")
    add.add_argument("--text", help="Transcript of the clip (without it the voice is x-vector only).")
    add.add_argument("--description", help="Speaker description.")
    add.add_argument("--language", help="Default language (English, Chinese, ...).")
    add.set_defaults(func=_add)

    listing = actions.add_parser("list", parents=[where], help="List saved voices.")
    listing.add_argument("--json", action="store_true", help="Print the API's JSON entries.")
    listing.set_defaults(func=_list)

    remove = actions.add_parser("rm", parents=[where], help="Delete a saved voice.")
    remove.add_argument("name")
    remove.set_defaults(func=_remove)

    export = actions.add_parser("export", parents=[where], help="Write a voice to one .swv file.")
    export.add_argument("name")
    export.add_argument("-o", "--output", help="Output file (default NAME.swv; '-' for stdout).")
    export.set_defaults(func=_export)

    imported = actions.add_parser("import", parents=[where], help="Save a voice from a .swv file.")
    imported.add_argument("file", help="A .swv file ('-' for stdin).")
    imported.add_argument("--name", help="Save it under this name instead of the one in the file.")
    imported.set_defaults(func=_import)


def _client(args: argparse.Namespace) -> Any:
    if args.url and args.data_dir:
        raise SystemExit("give either --url (a server) or --data-dir (a local library), not both")
    if args.url:
        from speakwire.voices.client import RemoteVoiceClient

        return RemoteVoiceClient(args.url, api_key=args.api_key)
    from speakwire.voices.client import LocalVoiceClient
    from speakwire.voices.store import default_data_dir

    try:
        return LocalVoiceClient(args.data_dir or str(default_data_dir()), voices_url=args.voices_url)
    except ValueError as exc:  # a --voices-url that is not s3://bucket/prefix
        raise SystemExit(f"error: {exc}") from None


def _run(args: argparse.Namespace, action: Any) -> int:
    try:
        client = _client(args)
    except SpeakwireError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except MissingExtraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        action(client)
    except SpeakwireError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


def _add(args: argparse.Namespace) -> int:
    from speakwire.voices.fields import voice_fields

    def action(client: Any) -> None:
        fields = voice_fields(
            name=args.name,
            consent=args.consent,
            ref_text=args.text,
            speaker_description=args.description,
            language=args.language,
        )
        audio = Path(args.audio).read_bytes()
        voice = client.add(fields, audio, mime_type=mimetypes.guess_type(args.audio)[0])
        mode = "with transcript" if voice.get("ref_text") else "x-vector only (no transcript)"
        print(f"saved voice '{voice['name']}' ({voice['duration']:.1f} s, {mode}) in {client.location}")

    return _run(args, action)


def _list(args: argparse.Namespace) -> int:
    def action(client: Any) -> None:
        voices = client.list_voices()
        if args.json:
            print(json.dumps(voices, indent=2, ensure_ascii=False))
            return
        if not voices:
            print(f"no saved voices in {client.location}")
            return
        rows = [("NAME", "DURATION", "TRANSCRIPT", "LANGUAGE", "PROMPTS", "CREATED", "CONSENT")]
        for v in voices:
            created = time.strftime("%Y-%m-%d %H:%M", time.localtime(int(v["created_at"])))
            prompts = len((v.get("compatibility") or {}).get("prompts") or ())
            consent = v["consent"] if len(v["consent"]) <= 40 else v["consent"][:39] + "…"
            rows.append(
                (
                    v["name"],
                    f"{v['duration']:.1f} s",
                    "yes" if v.get("ref_text") else "no",
                    v.get("language") or "-",
                    str(prompts),
                    created,
                    consent,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())

    return _run(args, action)


def _remove(args: argparse.Namespace) -> int:
    return _run(args, lambda client: print(client.remove(args.name)))


def _export(args: argparse.Namespace) -> int:
    from speakwire.voices.archive import SUFFIX

    def action(client: Any) -> None:
        name, data = client.export(args.name)
        if args.output == "-":
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        output = Path(args.output or f"{name}{SUFFIX}")
        output.write_bytes(data)
        print(f"exported voice '{name}' to {output} ({len(data) / 1024:.0f} KiB)", file=sys.stderr)

    return _run(args, action)


def _import(args: argparse.Namespace) -> int:
    def action(client: Any) -> None:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
        voice = client.import_archive(data, name=args.name)
        print(f"imported voice '{voice['name']}' ({voice['duration']:.1f} s) into {client.location}")

    return _run(args, action)
