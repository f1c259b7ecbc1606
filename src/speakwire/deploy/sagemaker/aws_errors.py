"""Reading botocore errors: which ones mean "that resource does not exist".

SageMaker reports a missing model, endpoint config or endpoint not with a
``ResourceNotFound`` code but as ``ValidationException`` with a message starting
"Could not find ..."; Application Auto Scaling uses ``ObjectNotFoundException``. Cleanup
treats those as already done, every other error as a failure to report.

A refused call (``AccessDenied``) is reported with the IAM action it needed: AWS names it
in most messages ("... is not authorized to perform: codebuild:CreateProject ..."), but S3
answers only "Access Denied", so the action is otherwise derived from the operation.
"""

from __future__ import annotations

import re
from typing import Any

_NOT_FOUND_CODES = frozenset({"ObjectNotFoundException", "ResourceNotFound", "ResourceNotFoundException"})
_ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError", "Forbidden", "403"}
)
_NAMED_ACTION = re.compile(r"perform: ([a-z0-9-]+:[A-Za-z0-9*]+)")
# Operations whose IAM action is not "<service>:<OperationName>".
_ACTION_FOR_OPERATION = {
    ("s3", "HeadBucket"): "s3:ListBucket",
    ("s3", "HeadObject"): "s3:GetObject",
    ("ecr", "GetLoginPassword"): "ecr:GetAuthorizationToken",
}


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError``, or the exception's class name."""
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", type(exc).__name__))
    return type(exc).__name__


def error_message(exc: BaseException) -> str:
    """The AWS error message of a ``ClientError``, or ``str(exc)``."""
    response: Any = getattr(exc, "response", None)
    if isinstance(response, dict):
        message = response.get("Error", {}).get("Message")
        if message:
            return str(message)
    return str(exc)


def is_not_found(exc: BaseException) -> bool:
    """True when the error says the resource does not exist (so there is nothing to delete)."""
    code = error_code(exc)
    if code in _NOT_FOUND_CODES:
        return True
    return code == "ValidationException" and "could not find" in error_message(exc).lower()


def is_access_denied(exc: BaseException) -> bool:
    """True when AWS refused the call for lack of permission."""
    return error_code(exc) in _ACCESS_DENIED_CODES


def refused_permission(exc: BaseException, service: str) -> str | None:
    """The IAM action a refused call needed (``codebuild:CreateProject``), or None if it was not refused.

    Args:
        exc: The botocore ``ClientError``.
        service: The IAM prefix of the client that made the call (``client.meta.service_model.signing_name``).
    """
    if not is_access_denied(exc):
        return None
    named = _NAMED_ACTION.search(error_message(exc))
    if named:
        return named.group(1)
    operation = str(getattr(exc, "operation_name", "") or "")
    if not operation:
        return None
    return _ACTION_FOR_OPERATION.get((service, operation), f"{service}:{operation}")


def explain(exc: BaseException, service: str | None = None) -> str:
    """One line for the user: the refused permission when there is one, else the AWS message."""
    action = refused_permission(exc, service or "") if service else None
    if action is None and is_access_denied(exc):
        named = _NAMED_ACTION.search(error_message(exc))
        action = named.group(1) if named else None
    if action is not None:
        return f"access denied: the caller needs {action} ({error_message(exc)})"
    return f"{error_code(exc)}: {error_message(exc)}"
