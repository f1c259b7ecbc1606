"""The endpoint's voice library in S3: chosen (or created, with ownership checks) before the endpoint exists.

Every instance of an endpoint reads and writes one library (``speakwire.voices.shared``),
so a voice saved through one instance speaks on the next and outlives any of them
(issue 33). By default it lives in ``speakwire-voices-<account>-<region>``, under a
prefix named after the endpoint; ``--voices-url s3://bucket/prefix`` names another
(e.g. one shared by a staging and a production endpoint). Either way the bucket must be
the deploying account's: every call here, and every call the container makes, carries
``ExpectedBucketOwner``, so a same-named bucket in another account is refused rather
than written to. A bucket we create blocks all public access. The library is the
user's data: deleting the endpoint leaves it (the guide says how to delete it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from speakwire.deploy.sagemaker.aws_errors import error_code, explain
from speakwire.deploy.sagemaker.build_requests import create_bucket_request
from speakwire.voices.s3 import BUCKET_OWNER_ENV, VOICES_URL_ENV, S3Location

Log = Callable[[str], None]


class VoiceLibraryError(Exception):
    """The library's bucket cannot be used (another account's, missing, or refused); nothing was created."""


@dataclass(frozen=True, slots=True)
class VoiceLibraryPlan:
    """Where the endpoint's library lives, whose bucket it is, and the container variables that say so."""

    location: S3Location
    account: str

    @property
    def environment(self) -> dict[str, str]:
        return {VOICES_URL_ENV: self.location.url, BUCKET_OWNER_ENV: self.account}


def default_bucket(account: str, region: str) -> str:
    """One bucket per account and region (S3 bucket names are global: the account keeps ours apart)."""
    return f"speakwire-voices-{account}-{region}"


def plan_voice_library(account: str, region: str, endpoint_name: str, voices_url: str | None) -> VoiceLibraryPlan:
    """``voices_url``, else the default bucket with the endpoint's name as the prefix.

    Raises:
        VoiceLibraryError: ``voices_url`` is not ``s3://bucket/prefix``.
    """
    try:
        location = S3Location.parse(voices_url or f"s3://{default_bucket(account, region)}/{endpoint_name}")
    except ValueError as exc:
        raise VoiceLibraryError(str(exc)) from exc
    if not location.prefix:
        raise VoiceLibraryError(
            f"--voices-url {location.url} needs a prefix (s3://{location.bucket}/<prefix>): the library must not be "
            "the bucket's root, whose other objects a delete would take"
        )
    return VoiceLibraryPlan(location, account)


def prepare_voice_library(
    s3: Any, sts: Any, *, region: str, endpoint_name: str, voices_url: str | None, log: Log = print
) -> VoiceLibraryPlan:
    """Check (or create) the library's bucket before anything else is created.

    The default bucket is created when missing; a bucket named by ``voices_url`` must exist already.

    Raises:
        VoiceLibraryError: The bucket is another account's, missing (``voices_url``), or a call was refused.
    """
    try:
        account = str(sts.get_caller_identity()["Account"])
    except (ClientError, BotoCoreError) as exc:
        raise VoiceLibraryError(f"get_caller_identity: {explain(exc, 'sts')}") from exc
    plan = plan_voice_library(account, region, endpoint_name, voices_url)
    bucket = plan.location.bucket
    if _bucket_exists(s3, bucket, account, explicit=voices_url is not None):
        log(f"voice library: {plan.location.url} (bucket {bucket} exists, owned by {account})")
        return plan
    try:
        s3.create_bucket(**create_bucket_request(bucket, region), ObjectOwnership="BucketOwnerEnforced")
    except ClientError as exc:
        if error_code(exc) != "BucketAlreadyOwnedByYou":  # BucketAlreadyExists: the name is another account's
            raise VoiceLibraryError(
                f"create_bucket {bucket}: {explain(exc, 's3')}; pass --voices-url s3://<your bucket>/<prefix>"
            ) from exc
    except BotoCoreError as exc:
        raise VoiceLibraryError(f"create_bucket {bucket}: {exc}") from exc
    try:
        s3.put_public_access_block(
            Bucket=bucket,
            ExpectedBucketOwner=account,
            PublicAccessBlockConfiguration={
                "BlockPublicAcls": True,
                "IgnorePublicAcls": True,
                "BlockPublicPolicy": True,
                "RestrictPublicBuckets": True,
            },
        )
    except (ClientError, BotoCoreError) as exc:
        raise VoiceLibraryError(f"put_public_access_block {bucket}: {explain(exc, 's3')}") from exc
    log(f"created S3 bucket {bucket} (private) for the voice library {plan.location.url}")
    return plan


def role_policy(location: S3Location) -> dict[str, Any]:
    """The S3 statements the endpoint's execution role needs for the library (and nothing else)."""
    bucket, prefix = location.bucket, location.prefix
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "SpeakwireVoiceLibraryObjects",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": f"arn:aws:s3:::{bucket}/{prefix}*",
            },
            {
                "Sid": "SpeakwireVoiceLibraryList",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
            },
        ],
    }


def describe(plan: VoiceLibraryPlan) -> str:
    """What deploy prints about the library: where, the role's policy, and how to delete it."""
    return (
        f"voice library: {plan.location.url} (shared by every instance; kept when the endpoint is deleted)\n"
        f"  the execution role needs: {json.dumps(role_policy(plan.location)['Statement'])}\n"
        f"  to delete it: speakwire sagemaker delete ... --delete-voices, or aws s3 rm --recursive {plan.location.url}"
    )


def _bucket_exists(s3: Any, bucket: str, account: str, *, explicit: bool) -> bool:
    try:
        s3.head_bucket(Bucket=bucket, ExpectedBucketOwner=account)
        return True
    except ClientError as exc:
        if error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
            # 403: the bucket is another account's (ExpectedBucketOwner), or the caller lacks s3:ListBucket.
            raise VoiceLibraryError(
                f"head_bucket {bucket}: {explain(exc, 's3')}; the voice library's bucket must be in account "
                f"{account}: pass --voices-url s3://<your bucket>/<prefix>"
            ) from exc
        if explicit:
            raise VoiceLibraryError(f"S3 bucket {bucket} (--voices-url) does not exist; create it first") from exc
        return False
    except BotoCoreError as exc:
        raise VoiceLibraryError(f"head_bucket {bucket}: {exc}") from exc


def recorded_library(sm: Any, endpoint_name: str) -> VoiceLibraryPlan | None:
    """The library ``deploy`` gave the endpoint, read from its model's environment; None when it has none.

    Raises:
        VoiceLibraryError: The model cannot be read (missing: the endpoint was deleted without its library).
    """
    try:
        model = sm.describe_model(ModelName=endpoint_name)
    except (ClientError, BotoCoreError) as exc:
        raise VoiceLibraryError(
            f"describe_model {endpoint_name}: {explain(exc, 'sagemaker')}; the library's URL is read from the "
            "model, so delete it by hand: aws s3 rm --recursive s3://<bucket>/<prefix>"
        ) from exc
    environment = (model.get("PrimaryContainer") or {}).get("Environment") or {}
    url = environment.get(VOICES_URL_ENV)
    if not url:
        return None
    account = environment.get(BUCKET_OWNER_ENV) or ""
    try:
        return VoiceLibraryPlan(S3Location.parse(url), account)
    except ValueError as exc:
        raise VoiceLibraryError(f"model {endpoint_name}'s {VOICES_URL_ENV}: {exc}") from exc


def delete_library(s3: Any, plan: VoiceLibraryPlan, *, log: Log = print) -> int:
    """Delete the library's objects (every saved voice: no undo); the number deleted.

    Only the library's own keys go (``<prefix>voices/`` and ``<prefix>items/``), never the rest of the prefix,
    and a library at a bucket's root is refused: that bucket may hold anything else.

    Raises:
        VoiceLibraryError: A call was refused or failed; what was deleted before it stays deleted.
    """
    if not plan.location.prefix:
        raise VoiceLibraryError(f"{plan.location.url} is a bucket's root: delete its voices/ and items/ by hand")
    deleted = sum(_delete_under(s3, plan, plan.location.prefix + folder) for folder in LIBRARY_FOLDERS)
    log(f"voice library {plan.location.url}: deleted ({deleted} objects)")
    return deleted


LIBRARY_FOLDERS = ("voices/", "items/")
"""The library's folders under its prefix (``voices.shared``: the names' claims, then each voice's files)."""


def _delete_under(s3: Any, plan: VoiceLibraryPlan, prefix: str) -> int:
    owner = {"ExpectedBucketOwner": plan.account} if plan.account else {}
    bucket, deleted = plan.location.bucket, 0
    token: dict[str, str] = {}
    try:
        while True:
            reply = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, **owner, **token)
            keys = [{"Key": entry["Key"]} for entry in reply.get("Contents") or ()]
            if keys:
                answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True}, **owner)
                if answer.get("Errors"):
                    first = answer["Errors"][0]
                    raise VoiceLibraryError(f"delete_objects {bucket}: {first.get('Key')}: {first.get('Message')}")
                deleted += len(keys)
            if not reply.get("IsTruncated"):
                break
            token = {"ContinuationToken": reply["NextContinuationToken"]}
    except (ClientError, BotoCoreError) as exc:
        raise VoiceLibraryError(f"deleting {plan.location.url}: {explain(exc, 's3')}") from exc
    return deleted
