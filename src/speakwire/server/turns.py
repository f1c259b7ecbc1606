"""Opening and closing an utterance on behalf of a protocol: admission, metrics, release.

Every protocol adapter (HTTP, WebSocket, SageMaker, the vendor dialects, Wyoming) starts its
utterances here, so admission control, the rejection counter and the active-streams gauge
behave the same whichever wire the text came in on.
"""

from __future__ import annotations

from speakwire.errors import ShuttingDownError, TooBusyError
from speakwire.server.options import ResolvedSpeech
from speakwire.server.state import ServerState
from speakwire.synthesis import Utterance
from speakwire.text.segmenter import ChunkSchedule, Granularity


def open_utterance(
    state: ServerState,
    resolved: ResolvedSpeech,
    *,
    protocol: str,
    granularity: Granularity = "sentence",
    schedule: ChunkSchedule | None = None,
    max_buffer_chars: int = 100_000,
) -> Utterance:
    """Admit a new utterance (raises ``TooBusyError``, counted as a rejection, at capacity or while draining).

    Call on the event loop; pair with ``close_utterance`` however the utterance ends.
    """
    _, pipeline, metrics = state.require_ready()
    engine = pipeline.engine.info.name
    try:
        if state.draining:  # SIGTERM: the utterances in flight finish, nothing new starts (server.drain)
            raise ShuttingDownError
        utterance = pipeline.utterance(
            resolved.request.fresh(),
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
    return utterance


def close_utterance(state: ServerState, utterance: Utterance, protocol: str) -> None:
    """Release the utterance's admission slot (cancelling it if unfinished) and the gauge; idempotent."""
    if utterance.released:
        return
    utterance.close()
    metrics = state.metrics
    if metrics is not None:
        metrics.active.labels(engine=metrics.engine, protocol=protocol).dec()
