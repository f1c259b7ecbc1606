"""The exception tree every layer raises, and the HTTP status each one maps to.

    SpeakwireError
    ├── BadRequestError        400  the request asks for something invalid
    ├── NotFoundError          404  unknown model, voice or route
    ├── ConflictError          409  a name already taken
    ├── PayloadTooLargeError   413  input over a limit
    ├── TooBusyError           429  admission control refused the stream
    │   └── ShuttingDownError  503  the server is draining before it exits (SIGTERM)
    ├── NotReadyError          503  engine still loading
    ├── LibraryUnavailableError 503 the shared voice library (S3) cannot be reached
    ├── InsufficientStorageError 507 the disk under the voice library is full: nothing was saved
    └── EngineError            500  the engine failed while synthesizing

Protocol layers turn these into an HTTP error body, an SSE error event or a
WebSocket ``error`` event; engines and the pipeline never know which.
"""

from __future__ import annotations


class SpeakwireError(Exception):
    """Base of all errors speakwire reports to clients."""

    status_code = 500
    error_type = "InternalServerError"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def to_dict(self) -> dict[str, object]:
        """The OpenAI-style error object: ``{"message", "type", "param", "code"}``."""
        return {"message": self.message, "type": self.error_type, "param": self.param, "code": self.status_code}


class BadRequestError(SpeakwireError):
    status_code = 400
    error_type = "BadRequestError"


class NotFoundError(SpeakwireError):
    status_code = 404
    error_type = "NotFoundError"


class ConflictError(SpeakwireError):
    status_code = 409
    error_type = "ConflictError"


class PayloadTooLargeError(SpeakwireError):
    status_code = 413
    error_type = "PayloadTooLargeError"


class TooBusyError(SpeakwireError):
    status_code = 429
    error_type = "TooBusyError"

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShuttingDownError(TooBusyError):
    """The server got SIGTERM and admits nothing new while its streams finish (``server.drain``).

    A ``TooBusyError``, so every protocol refuses it where and as it refuses a stream at capacity (WebSocket close
    1013, ``Retry-After``), but HTTP answers 503: this instance will not have room again, another one will.
    """

    status_code = 503
    error_type = "ServiceUnavailableError"

    def __init__(self, message: str = "Server is shutting down; retry (another instance will answer).") -> None:
        super().__init__(message, retry_after_s=1.0)


class NotReadyError(SpeakwireError):
    status_code = 503
    error_type = "ServiceUnavailableError"


class LibraryUnavailableError(SpeakwireError):
    """The voice library's source of truth (S3, ``--voices-url``) did not answer; the message says why.

    Only library calls fail with it: speech with built-in voices never reads the library, and a saved voice
    already in this instance's cache still speaks (``speakwire.voices.shared``).
    """

    status_code = 503
    error_type = "ServiceUnavailableError"


class InsufficientStorageError(SpeakwireError):
    """The disk holding the voice library is full (ENOSPC, a quota, SQLite's "database or disk is full").

    Raised only after the write was undone, so the library is as it was: not the client's mistake, and worth
    retrying once space is freed (``speakwire.voices.store``).
    """

    status_code = 507
    error_type = "InsufficientStorageError"


class EngineError(SpeakwireError):
    status_code = 500
    error_type = "EngineError"


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message names the pip command that installs it."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(f'{module} is not installed. Install it with: pip install "speakwire[{extra}]"')
