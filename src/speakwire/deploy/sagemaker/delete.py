"""Delete an endpoint, its config and its model, and say exactly what is left.

The AWS sample deletes the endpoint, waits for it to go, then deletes the config and the
model — but a failed waiter there skips the last two and leaks them silently. Here each
of the three steps runs whatever happened to the one before; a resource that is already
gone counts as done, and anything that could not be deleted (or whose deletion could not
be confirmed) is listed in the result so the CLI can exit non-zero and name it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import BotoCoreError, ClientError, WaiterError

from speakwire.deploy.sagemaker.aws_errors import error_message, is_not_found
from speakwire.deploy.sagemaker.progress import report_endpoint_polls

Resource = Literal["endpoint", "endpoint config", "model"]
Outcome = Literal["deleted", "not found", "failed", "unconfirmed"]

ALL_RESOURCES: tuple[Resource, ...] = ("endpoint", "endpoint config", "model")
DEFAULT_DELETE_WAITER_CONFIG: Mapping[str, int] = {"Delay": 15, "MaxAttempts": 80}

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Deletion:
    """What happened to one resource."""

    resource: Resource
    name: str
    outcome: Outcome
    detail: str = ""

    @property
    def left(self) -> bool:
        """True when the resource may still exist (and may still cost money)."""
        return self.outcome in ("failed", "unconfirmed")

    def describe(self) -> str:
        text = f"{self.resource} {self.name}: {self.outcome}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """The three deletions in the order they ran."""

    endpoint_name: str
    deletions: tuple[Deletion, ...]

    @property
    def left(self) -> tuple[Deletion, ...]:
        """Resources that may still exist."""
        return tuple(d for d in self.deletions if d.left)

    @property
    def ok(self) -> bool:
        return not self.left


def delete(
    sm_client: Any,
    endpoint_name: str,
    *,
    waiter_config: Mapping[str, int] | None = None,
    log: Log = print,
    resources: Collection[Resource] = ALL_RESOURCES,
) -> DeleteResult:
    """Delete the endpoint (and wait until it is gone), then the endpoint config, then the model.

    All three share ``endpoint_name``, as ``deploy`` creates them. Each step runs even if
    an earlier one failed; a missing resource counts as deleted ("not found").

    Args:
        sm_client: A boto3 SageMaker client.
        endpoint_name: Name of the endpoint, endpoint config and model.
        waiter_config: ``WaiterConfig`` for ``endpoint_deleted`` (default Delay 15, MaxAttempts 80).
        log: Where progress and the per-resource report go.
        resources: Which of the three to delete; ``deploy`` passes only what it created.

    Returns:
        One :class:`Deletion` per resource asked for; ``result.left`` lists what may remain.
    """
    deletions: list[Deletion] = []
    if "endpoint" in resources:
        deletions.append(_delete_endpoint(sm_client, endpoint_name, waiter_config, log))
    if "endpoint config" in resources:
        deletions.append(
            _delete_simple(
                "endpoint config",
                endpoint_name,
                lambda: sm_client.delete_endpoint_config(EndpointConfigName=endpoint_name),
            )
        )
    if "model" in resources:
        deletions.append(
            _delete_simple("model", endpoint_name, lambda: sm_client.delete_model(ModelName=endpoint_name))
        )
    for deletion in deletions:
        log(deletion.describe())
    result = DeleteResult(endpoint_name, tuple(deletions))
    if result.left:
        log("NOT deleted, check the console or rerun: " + ", ".join(d.resource for d in result.left))
    return result


def _delete_endpoint(sm_client: Any, name: str, waiter_config: Mapping[str, int] | None, log: Log) -> Deletion:
    try:
        sm_client.delete_endpoint(EndpointName=name)
    except ClientError as exc:
        if is_not_found(exc):
            return Deletion("endpoint", name, "not found")
        return Deletion("endpoint", name, "failed", error_message(exc))
    except BotoCoreError as exc:
        return Deletion("endpoint", name, "failed", str(exc))
    log(f"deleting endpoint {name}; waiting until it is gone")
    try:
        with report_endpoint_polls(sm_client, name, log):
            sm_client.get_waiter("endpoint_deleted").wait(
                EndpointName=name, WaiterConfig=dict(waiter_config or DEFAULT_DELETE_WAITER_CONFIG)
            )
    except (WaiterError, BotoCoreError, ClientError) as exc:
        # Deletion was requested but not seen to finish: the endpoint may still bill.
        return Deletion("endpoint", name, "unconfirmed", str(exc))
    return Deletion("endpoint", name, "deleted")


def _delete_simple(resource: Resource, name: str, call: Callable[[], object]) -> Deletion:
    try:
        call()
    except ClientError as exc:
        if is_not_found(exc):
            return Deletion(resource, name, "not found")
        return Deletion(resource, name, "failed", error_message(exc))
    except BotoCoreError as exc:
        return Deletion(resource, name, "failed", str(exc))
    return Deletion(resource, name, "deleted")
