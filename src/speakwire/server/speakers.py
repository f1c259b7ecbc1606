"""SpeakerChain: utterances of one connection spoken one after another, each by a speaker task.

The receive loop never waits for synthesis, so each utterance gets a task that writes its output; the
tasks are chained so audio never interleaves, while the next utterance may already synthesize. A speaker
owns its admission (``Admitted``) and gives it back however it ends; ``cancel_all`` stops every utterance
at once (barge-in, the connection's end) and waits until the speakers are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from speakwire.server.admission import Admitted
from speakwire.server.request_ids import bound
from speakwire.server.websocket_channel import ChannelClosed

logger = logging.getLogger(__name__)


@dataclass(eq=False, slots=True)
class Speaker:
    """One utterance (None: a turn with nothing to say) and the task speaking it."""

    admitted: Admitted | None
    task: asyncio.Task[None] = field(init=False)

    @property
    def done(self) -> bool:
        return self.task.done()


class SpeakerChain:
    """Speaker tasks of one connection, in the order their utterances began."""

    def __init__(self) -> None:
        self._speakers: list[Speaker] = []

    @property
    def busy(self) -> bool:
        """A speaker is still speaking (or waiting for its turn)."""
        return any(not s.done for s in self._speakers)

    @property
    def speaking(self) -> list[Speaker]:
        """The speakers not yet done, oldest first."""
        return [s for s in self._speakers if not s.done]

    def start(self, admitted: Admitted | None, speak: Callable[[Speaker], Awaitable[None]]) -> Speaker:
        """Start a speaker that runs ``speak`` once every earlier speaker has ended, however it ended.

        Its request id (the utterance's) is bound while it speaks. A ``ChannelClosed`` from ``speak`` ends
        it quietly; the utterance is cancelled and its slot given back in every case.
        """
        self._speakers = [s for s in self._speakers if not s.done]
        previous = self._speakers[-1].task if self._speakers else None
        speaker = Speaker(admitted)
        speaker.task = asyncio.get_running_loop().create_task(self._run(speaker, previous, speak))
        self._speakers.append(speaker)
        return speaker

    async def _run(
        self, speaker: Speaker, previous: asyncio.Task[None] | None, speak: Callable[[Speaker], Awaitable[None]]
    ) -> None:
        admitted = speaker.admitted
        try:
            if previous is not None:
                await asyncio.wait([previous])  # only this task's own cancellation propagates
            with bound(admitted.request_id) if admitted is not None else contextlib.nullcontext():
                try:
                    await speak(speaker)
                except (ChannelClosed, asyncio.CancelledError):
                    raise
                except Exception:
                    # Nobody awaits a speaker's result: say what broke here, under the utterance's id.
                    logger.exception("speaker failed")
        except ChannelClosed:
            pass
        finally:
            if admitted is not None:
                admitted.close()

    async def cancel_all(self) -> list[Speaker]:
        """Stop every utterance now, wait until the speakers are gone, give every slot back.

        Returns the speakers that were still speaking (what they sent is final now).
        """
        stopped, self._speakers = [s for s in self._speakers if not s.done], []
        for speaker in stopped:
            if speaker.admitted is not None:
                speaker.admitted.utterance.cancel()
            speaker.task.cancel()
        for speaker in stopped:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await speaker.task
            # A speaker cancelled before it first ran never reaches its ``finally``: give its slot back here.
            if speaker.admitted is not None:
                speaker.admitted.close()
        return stopped
