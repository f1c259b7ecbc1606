"""A real S3 API on a loopback port: moto's standalone server, which can go down and come back.

moto keeps its buckets in this process, not in the server thread, so ``stop()`` then
``start()`` on the same port is an S3 outage — connections refused — after which every
object is still there, as after a real one. Server processes under test reach it through
``env()`` (boto3 reads ``AWS_ENDPOINT_URL_S3``); nothing here is a mock of ours.

It serves one request at a time: moto checks ``If-None-Match: *`` and then writes, two
steps that two request threads could interleave, where S3 makes a conditional write atomic
(the racing-adds test needs S3's guarantee, not moto's threads). This is moto's own
application (``moto.server``'s ``ThreadedMotoServer`` runs the same one, threaded).
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import BaseWSGIServer, make_server

from support.live_server import free_port

REGION = "us-east-1"


class _OneAtATime(MotoRequestHandler):
    """HTTP/1.0: each request on a connection of its own, so a client's idle keep-alive never holds up the others
    on a server that answers one connection at a time."""

    protocol_version = "HTTP/1.0"

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Quiet: a line per S3 request would bury the servers' own logs in a test's output."""


class LoopbackS3:
    """moto's S3 server on ``127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackS3:
        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", self.port, app, threaded=False, request_handler=_OneAtATime)
        self._thread = threading.Thread(target=self._server.serve_forever, name="loopback-s3", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering: connections are refused until ``start()``."""
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._server.server_close()
            self._server = self._thread = None

    def env(self) -> dict[str, str]:
        """What a process needs to use this S3 with boto3's default configuration."""
        return {
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def client(self) -> Any:
        return boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        ).client("s3", endpoint_url=self.endpoint)

    def create_bucket(self, bucket: str) -> None:
        self.client().create_bucket(Bucket=bucket)

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        reply = self.client().list_objects_v2(Bucket=bucket, Prefix=prefix)
        return [str(entry["Key"]) for entry in reply.get("Contents") or ()]
