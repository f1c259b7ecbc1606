"""The SageMaker runtime's error replies, as botocore parses them (no I/O).

botocore's rest-json parser takes the error code from the ``x-amzn-ErrorType`` header (up
to the first ``:``) and the message from the body's ``message`` / ``Message``; for a code that
names a modeled error (``ModelError``) it also reads the shape's members from the body, so
``ClientError.response`` carries ``OriginalStatusCode``, ``OriginalMessage`` and ``LogStreamArn``.
The wording follows what the real runtime returns, so code that matches on it locally keeps
working against an endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

ERROR_TYPE_HEADER = "x-amzn-ErrorType"
_CORAL = "http://internal.amazon.com/coral/com.amazon.sagemaker.runtime/"
PRIMARY_CONTAINER = "primary"
LOCAL_ACCOUNT_ID = "000000000000"


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An HTTP error response: status, headers and JSON body."""

    status: int
    error_type: str
    body: dict[str, object] = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        return {ERROR_TYPE_HEADER: f"{self.error_type}:{_CORAL}", "Content-Type": "application/json"}

    def content(self) -> bytes:
        return json.dumps(self.body).encode("utf-8")


def log_group(endpoint_name: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint_name}"


def model_error(
    original_status: int | None,
    original_body: bytes,
    *,
    endpoint_name: str,
    region: str,
    account_id: str = LOCAL_ACCOUNT_ID,
) -> ErrorReply:
    """HTTP 424 ``ModelError``: the container answered with an error (or not at all).

    ``original_status`` None means no answer came (unreachable, timed out); the message then
    says so and ``OriginalStatusCode`` is left out.
    """
    original = original_body.decode("utf-8", errors="replace")
    if original_status is None:
        kind = "server error (0)"
    elif original_status < 500:
        kind = f"client error ({original_status})"
    else:
        kind = f"server error ({original_status})"
    console = (
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}"
        f"#logEventViewer:group={log_group(endpoint_name)}"
    )
    body: dict[str, object] = {
        "ErrorCode": "CLIENT_ERROR_FROM_MODEL"
        if original_status and original_status < 500
        else "SERVER_ERROR_FROM_MODEL",
        "Message": (
            f'Received {kind} from {PRIMARY_CONTAINER} with message "{original}". '
            f"See {console} in account {account_id} for more information."
        ),
        "OriginalMessage": original,
        "LogStreamArn": f"arn:aws:logs:{region}:{account_id}:log-group:{log_group(endpoint_name)}",
    }
    if original_status is not None:
        body["OriginalStatusCode"] = original_status
    return ErrorReply(424, "ModelError", body)


def validation_error(message: str) -> ErrorReply:
    """HTTP 400 ``ValidationError`` (the service model's name; the console shows the same code)."""
    return ErrorReply(400, "ValidationError", {"message": message})


def endpoint_not_found(endpoint_name: str, account_id: str = LOCAL_ACCOUNT_ID) -> ErrorReply:
    """What the runtime says for a name with no endpoint behind it."""
    return validation_error(f"Endpoint {endpoint_name} of account {account_id} not found.")
