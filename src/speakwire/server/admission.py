"""Admission: an utterance a protocol may run, and its slot given back however it ends.

Every protocol adapter starts its utterances here, so admission control, the rejection counter and the
active-streams gauge behave the same whichever wire the text came in on. ``admit`` returns an
``Admitted`` that owns the slot: use it as a context manager (``with``/``async with``) around the work,
so the slot is given back on every path, and ``close()`` is safe to call again.
"""

from __future__ import annotations

from types import TracebackType

from speakwire.errors import ShuttingDownError, TooBusyError
from speakwire.server.options import ResolvedSpeech
from speakwire.server.request_ids import current_request_id, new_request_id
from speakwire.server.state import ServerState
from speakwire.synthesis import Utterance
from speakwire.text.segmenter import ChunkSchedule, Granularity


class Admitted:
    """An admitted utterance, its protocol and its request id; ``close`` releases its slot (idempotent)."""

    def __init__(self, state: ServerState, utterance: Utterance, protocol: str, request_id: str) -> None:
        self.state = state
        self.utterance = utterance
        self.protocol = protocol
        self.request_id = request_id

    def close(self) -> None:
        """Give the slot back (cancelling the utterance if unfinished) and lower the gauge; idempotent."""
        utterance = self.utterance
        if utterance.released:
            return
        utterance.close()
        metrics = self.state.metrics
        if metrics is not None:
            metrics.active.labels(engine=metrics.engine, protocol=self.protocol).dec()

    def say(self, text: str) -> Admitted:
        """Feed ``text`` whole and end the input (one request, one text); if that fails (too long, nothing
        to speak), the slot is given back before the error is raised, since no response will own it."""
        try:
            self.utterance.feed(text)
            self.utterance.finish()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self) -> Utterance:
        return self.utterance

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Utterance:
        return self.utterance

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def admit(
    state: ServerState,
    resolved: ResolvedSpeech,
    *,
    protocol: str,
    granularity: Granularity = "sentence",
    schedule: ChunkSchedule | None = None,
    max_buffer_chars: int = 100_000,
    request_id: str | None = None,
) -> Admitted:
    """Admit a new utterance (raises ``TooBusyError``, counted as a rejection, at capacity or while draining).

    Call on the event loop. ``request_id`` defaults to the id bound for the request or connection.
    """
    _, pipeline, metrics = state.require_ready()
    engine = pipeline.engine.info.name
    state.refresh_capacity()  # the limit as of the work done until now (``server.live_capacity``)
    try:
        if state.draining:  # SIGTERM: the utterances in flight finish, nothing new starts (server.drain)
            raise ShuttingDownError
        utterance = pipeline.utterance(
            resolved.request,
            output_rate=resolved.output_rate,
            granularity=granularity,
            schedule=schedule,
            max_buffer_chars=max_buffer_chars,
            observer=metrics.observer(protocol),
        )
    except TooBusyError:
        metrics.rejections.labels(engine=engine, protocol=protocol).inc()
        raise
    metrics.active.labels(engine=engine, protocol=protocol).inc()
    admitted = Admitted(state, utterance, protocol, request_id or current_request_id() or new_request_id())
    utterance.request_id = admitted.request_id
    return admitted
