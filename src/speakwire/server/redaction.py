"""No secret reaches a log: API keys sent in a query string are masked in every server log line.

Clients that cannot set headers (browsers' WebSocket, SageMaker relays, some SDKs) put the key in the
URL (``?api_key=…``, ``?token=…``, ``?xi-api-key=…``), and uvicorn logs every request line, query
string included. A filter on uvicorn's loggers rewrites those values to ``***`` before any handler
formats the record.
"""

from __future__ import annotations

import logging
import re

SECRET_PARAMS = ("api_key", "apikey", "api-key", "xi-api-key", "key", "token", "access_token", "auth", "authorization")
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:" + "|".join(re.escape(name) for name in SECRET_PARAMS) + r")=)[^&;#\s\"']*",
    re.IGNORECASE,
)
LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "speakwire")


def redact(text: str) -> str:
    """``text`` with the values of secret query parameters replaced by ``***``."""
    return _QUERY_SECRET.sub(r"\g<name>***", text)


class RedactSecrets(logging.Filter):
    """Masks secret query parameters in a record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in record.args.items()}
        return True


def install_log_redaction() -> None:
    """Put the filter on uvicorn's and our loggers (idempotent)."""
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactSecrets) for existing in logger.filters):
            logger.addFilter(RedactSecrets())
