"""Map errors to OpenAI-shaped JSON bodies: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.routing import Match, Route

from speakwire.errors import SpeakwireError, TooBusyError

logger = logging.getLogger(__name__)


def error_response(
    status: int, message: str, error_type: str, param: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    return JSONResponse(body, status_code=status, headers=headers)


def allowed_methods(request: Request) -> str:
    """The ``Allow`` header of a 405: every method some route serves at this path. Starlette names only the first
    route's, and a path may have several (``GET`` and ``POST /ping``, ``GET`` and ``DELETE`` a voice)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods and route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SpeakwireError)
    async def on_speakwire_error(_: Request, exc: SpeakwireError) -> JSONResponse:
        response = error_response(exc.status_code, exc.message, exc.error_type, exc.param)
        if isinstance(exc, TooBusyError):
            response.headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
        if exc.status_code >= 500 and not isinstance(exc, TooBusyError):  # a drain's 503 is not a fault
            logger.error("%s: %s", exc.error_type, exc.message)
        return response

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        param = ".".join(loc) or None
        if first.get("type") == "extra_forbidden":
            message = f"Unrecognized request argument supplied: {param}"
        elif first.get("type") == "json_invalid":
            message = f"Request body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}"
        else:
            message = f"Invalid value for '{param}': {first.get('msg', 'invalid')}" if param else str(first.get("msg"))
        return error_response(400, message, "BadRequestError", param)

    @app.exception_handler(HTTPException)
    async def on_http_error(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = allowed_methods(request)
        return error_response(exc.status_code, str(exc.detail), "HTTPError", headers=headers)
