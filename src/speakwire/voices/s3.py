"""The few S3 calls the shared library makes, through boto3, with S3's failures turned into our errors.

``shared.SharedVoiceStore`` decides what to read and write and in what order; this
file only knows objects: get, put (optionally only if absent: S3's conditional write,
``If-None-Match: *``), delete (optionally only if unchanged: ``If-Match``), list.
A missing object is an answer (None); anything else that keeps S3 from answering —
no network, no bucket, no permission, throttling past the retries — is a
``LibraryUnavailableError`` that says which library and why, so the server answers
503 with the reason. Timeouts are short: a library call waits seconds, not minutes,
for an S3 that is down.

boto3 finds its endpoint and credentials the usual way (``AWS_ENDPOINT_URL_S3``,
the instance's role, ``AWS_PROFILE``). ``SPEAKWIRE_VOICES_BUCKET_OWNER`` (set by
``speakwire sagemaker deploy``) sends ``ExpectedBucketOwner`` with every call, so a
bucket of the same name in another account is never read or written.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speakwire.errors import LibraryUnavailableError, MissingExtraError

VOICES_URL_ENV = "SPEAKWIRE_VOICES_URL"
BUCKET_OWNER_ENV = "SPEAKWIRE_VOICES_BUCKET_OWNER"
QUIET_AFTER_FAILURE_S = 1.0
"""After S3 could not be reached, calls fail at once with the same reason for this long: a request naming
``alloy`` (asked of the library before presets) does not wait out boto3's retries each time S3 is down."""
CONFLICT_RETRIES = 3
"""S3 answers 409 ConditionalRequestConflict while another conditional write of the key is in flight: retry."""
_MISSING = {"NoSuchKey", "404", "NotFound"}
_PRECONDITION = {"PreconditionFailed", "412"}


class ObjectExistsError(Exception):
    """A write only-if-absent found the key taken (412)."""


@dataclass(frozen=True, slots=True)
class S3Location:
    """``s3://bucket/prefix``: the prefix always ends in ``/`` (or is empty: the bucket's root)."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """Raises ``ValueError`` for anything but ``s3://bucket[/prefix]``."""
        scheme, _, rest = url.strip().partition("://")
        if scheme.lower() != "s3" or not rest:
            raise ValueError(f"--voices-url must be s3://bucket/prefix (the local library needs none), got {url!r}")
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise ValueError(f"--voices-url {url!r} names no bucket")
        prefix = prefix.strip("/")
        return cls(bucket, f"{prefix}/" if prefix else "")

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True, slots=True)
class S3Object:
    data: bytes
    etag: str
    metadata: Mapping[str, str]


class S3Objects:
    """Objects under one ``S3Location``; keys are relative to its prefix. Thread-safe (one boto3 client)."""

    def __init__(self, location: S3Location, client: Any, *, expected_owner: str | None = None) -> None:
        self.location = location
        self._client = client
        self._owner = {"ExpectedBucketOwner": expected_owner} if expected_owner else {}
        self._lock = threading.Lock()
        self._unreachable: tuple[float, str] | None = None
        """(until when, why): S3 did not answer lately."""
        self.calls: Counter[str] = Counter()
        """S3 requests made, by operation: what tests and benchmarks count."""

    @classmethod
    def connect(cls, location: S3Location, environ: Mapping[str, str] | None = None) -> S3Objects:
        """A client for ``location`` as boto3 configures itself here, with short timeouts."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError as exc:
            raise MissingExtraError("s3", "boto3") from exc
        env = os.environ if environ is None else environ
        config = Config(
            connect_timeout=3, read_timeout=15, retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=32
        )
        client = boto3.session.Session().client("s3", config=config)
        return cls(location, client, expected_owner=env.get(BUCKET_OWNER_ENV))

    def get(self, key: str, *, even_if_quiet: bool = False) -> S3Object | None:
        """The object, or None when there is none. ``even_if_quiet`` asks S3 even within the quiet time after a
        failure (to learn what a write whose answer was lost did)."""
        from botocore.exceptions import BotoCoreError

        try:
            reply = self._call("get_object", Key=key, even_if_quiet=even_if_quiet)
            data = reply["Body"].read()
        except _Missing:
            return None
        except BotoCoreError as exc:  # the body cut short: S3 (or the network) went away mid-read
            raise self._unavailable(str(exc)) from exc
        return S3Object(data, str(reply.get("ETag", "")), dict(reply.get("Metadata") or {}))

    def put(self, key: str, data: bytes, *, metadata: Mapping[str, str] | None = None, if_absent: bool = False) -> str:
        """Write the object whole (S3 never shows half of one) and return its ETag.

        Raises:
            ObjectExistsError: ``if_absent`` and the key exists (also when another writer won a race for it).
        """
        extra: dict[str, Any] = {"Metadata": dict(metadata)} if metadata else {}
        if if_absent:
            extra["IfNoneMatch"] = "*"
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                return str(self._call("put_object", Key=key, Body=data, **extra).get("ETag", ""))
            except _Conflict:
                if attempt == CONFLICT_RETRIES:
                    raise ObjectExistsError(key) from None
                time.sleep(0.05 * (attempt + 1))
            except _Precondition:
                raise ObjectExistsError(key) from None
        raise AssertionError("unreachable")

    def delete(self, key: str, *, if_match: str | None = None) -> bool:
        """Remove the object; with ``if_match`` only while its ETag is that one (where the S3 implementation
        offers conditional deletes; elsewhere unconditionally). False when it was not removed."""
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                self._call("delete_object", Key=key, **({"IfMatch": if_match} if if_match else {}))
            except (_Missing, _Precondition):
                return False
            except _NotImplemented:  # an S3-compatible server without conditional deletes
                return self.delete(key)
            except _Conflict:  # S3's 409 for conditional requests racing on one key: try again, as put does
                if attempt == CONFLICT_RETRIES:
                    raise self._unavailable(f"delete {key}: conflicting requests kept racing") from None
                time.sleep(0.05 * (attempt + 1))
                continue
            return True
        raise AssertionError("unreachable")

    def list(self, prefix: str) -> list[tuple[str, str]]:
        """``(key, etag)`` of every object under ``prefix`` (relative keys, in S3's key order)."""
        found: list[tuple[str, str]] = []
        token: dict[str, str] = {}
        while True:
            reply = self._call("list_objects_v2", Prefix=self.location.prefix + prefix, **token)
            for entry in reply.get("Contents") or ():
                found.append((str(entry["Key"])[len(self.location.prefix) :], str(entry.get("ETag", ""))))
            if not reply.get("IsTruncated"):
                return found
            token = {"ContinuationToken": str(reply["NextContinuationToken"])}

    def check(self) -> None:
        """Raise ``LibraryUnavailableError`` unless the bucket answers (and is the expected owner's)."""
        self._call("head_bucket")

    def _call(self, operation: str, **params: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        even_if_quiet = bool(params.pop("even_if_quiet", False))

        if "Key" in params:
            params["Key"] = self.location.prefix + params["Key"]
        unreachable = self._unreachable
        if unreachable is not None and time.monotonic() < unreachable[0] and not even_if_quiet:
            raise self._unavailable(unreachable[1])
        with self._lock:
            self.calls[operation] += 1
        try:
            reply = getattr(self._client, operation)(Bucket=self.location.bucket, **self._owner, **params)
        except ClientError as exc:
            error = exc.response.get("Error") or {}
            code = str(error.get("Code", ""))
            if code in _MISSING and operation != "head_bucket":
                raise _Missing from exc
            if code in _PRECONDITION:
                raise _Precondition from exc
            if code == "ConditionalRequestConflict":
                raise _Conflict from exc
            if code == "NotImplemented" and "IfMatch" in params:
                raise _NotImplemented from exc
            raise self._unavailable(f"{code}: {error.get('Message') or exc}") from exc
        except BotoCoreError as exc:  # no answer at all (connection refused, timeout): stay quiet a moment
            self._unreachable = (time.monotonic() + QUIET_AFTER_FAILURE_S, str(exc))
            raise self._unavailable(str(exc)) from exc
        self._unreachable = None
        return reply

    def _unavailable(self, reason: str) -> LibraryUnavailableError:
        return LibraryUnavailableError(
            f"The shared voice library {self.location.url} cannot be reached ({reason}). Saved voices already "
            "cached on this instance still speak, and built-in voices are unaffected; retry when S3 answers."
        )


class _Missing(Exception):
    pass


class _Precondition(Exception):
    pass


class _Conflict(Exception):
    pass


class _NotImplemented(Exception):
    pass
