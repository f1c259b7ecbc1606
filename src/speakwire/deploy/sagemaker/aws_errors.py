"""Reading botocore errors: which ones mean "that resource does not exist".

SageMaker reports a missing model, endpoint config or endpoint not with a
``ResourceNotFound`` code but as ``ValidationException`` with a message starting
"Could not find ..."; Application Auto Scaling uses ``ObjectNotFoundException``. Cleanup
treats those as already done, every other error as a failure to report.
"""

from __future__ import annotations

from typing import Any

_NOT_FOUND_CODES = frozenset({"ObjectNotFoundException", "ResourceNotFound", "ResourceNotFoundException"})


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
