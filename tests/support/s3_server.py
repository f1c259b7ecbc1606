"""A real S3 API on a loopback port: moto's standalone server, which can go down and come back.

moto keeps its buckets in this process, not in the server thread, so ``stop()`` then
``start()`` on the same port is an S3 outage — connections refused — after which every
object is still there, as after a real one. Server processes under test reach it through
``env()`` (boto3 reads ``AWS_ENDPOINT_URL_S3``); nothing here is a mock of ours.
"""

from __future__ import annotations

from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from support.live_server import free_port

REGION = "us-east-1"


class LoopbackS3:
    """moto's S3 server on ``127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self.port = free_port()
        self._server: ThreadedMotoServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackS3:
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

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
