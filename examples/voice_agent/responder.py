"""The ``--local`` LLM: an OpenAI-compatible chat endpoint that answers from the words it heard, deterministically.

The agent talks to it with pipecat's ``OpenAILLMService``, as it would to any ``--llm-url``, so ``--local`` runs the
same pipeline as a real model. ``reply`` reads the last user message: a question about a topic it knows (matched by
key words, since the local speech-to-text is PocketSphinx) gets that topic's answer, anything else is repeated
back. Answers stream as chat-completion chunks, a few words each, as a model's tokens would.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

MODEL = "speakwire-local-responder"

TOPICS: list[tuple[frozenset[str], str]] = [
    (frozenset({"capital", "france"}), "The capital of France is Paris."),
    (frozenset({"weather"}), "It is sunny and warm today, with a light breeze."),
    (frozenset({"name"}), "My name is Joe, a speakwire voice."),
    (frozenset({"time"}), "It is time for a cup of tea."),
    (frozenset({"color", "sky"}), "The sky is blue on a clear day."),
    (frozenset({"spider"}), "A spider has eight legs."),
    (frozenset({"week"}), "A week has seven days."),
    (frozenset({"moon"}), "The moon goes around the earth about once a month."),
    (frozenset({"music"}), "I like music with a good beat."),
    (frozenset({"hello"}), "Hello! How can I help you today?"),
]
"""Key words → answer; the first topic whose words were all heard wins (a topic with more words comes first)."""


def reply(heard: str) -> str:
    """The answer to ``heard``: a known topic's, or the words repeated back."""
    words = set(re.findall(r"[a-z']+", heard.lower()))
    for keys, answer in TOPICS:
        if keys <= words:
            return answer
    return f"You said: {heard.strip()}." if heard.strip() else "Sorry, I did not catch that."


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # content parts
                return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            return str(content or "")
    return ""


def _chunk(completion_id: str, delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n"


async def _stream(answer: str) -> AsyncIterator[str]:
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    yield _chunk(completion_id, {"role": "assistant", "content": ""})
    words = answer.split(" ")
    for i in range(0, len(words), 3):
        yield _chunk(completion_id, {"content": " ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "")})
    yield _chunk(completion_id, {}, "stop")
    yield "data: [DONE]\n\n"


def create_app() -> FastAPI:
    app = FastAPI(title="speakwire local responder")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        body = await request.json()
        answer = reply(last_user_text(body.get("messages", [])))
        if body.get("stream"):
            return StreamingResponse(_stream(answer), media_type="text/event-stream")
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": MODEL,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "speakwire"}]}

    return app
