"""One generation loop per loaded Qwen3 model: every active utterance advances one codec frame per step.

A thread owns the device. Each turn it takes new utterances into free KV slots and runs
their prompts (a long prompt in chunks, so running rows wait at most one chunk), then
steps every row that can step in one batch: the code predictor fills the 15 residual
codebooks of each row's current frame, the frame goes to the row's listener, and one
batched talker forward reads it back together with the row's next text token and
samples the row's next first-codebook code. Rows end at EOS, at their frame budget, or
when cancelled; their slot is free for the next utterance at once.

Text may arrive while the row generates (``Row.feed``). A row whose text track has
reached text that has not arrived yet sits out steps until more text, or ``finish``,
comes: it never reads the end of the text early. A row far ahead of real time sits
out while others are behind (``max_lead_s``), so the batch serves the most urgent.

The loop owns a row from admission to its last sample. A row submitted with an ``output`` is decoded
here: the loop knows where its chunks end (``chunk_schedule``), hands each step's chunk ends to code2wav
together (``DecodeBatcher.submit``), and code2wav gives the audio to the output, then the row's end, in
order. Nobody waits on a row: a held row (``Row.hold``: its utterance's reader is a whole lead behind) sits
out until it is released. A row without an output (tests, benchmarks) hands out its raw frames
(``Row.events``). With nothing to do the loop thread sleeps until something changes (a row, its text, a
release): an idle engine makes no periodic wake-ups.
"""

from __future__ import annotations

import heapq
import logging
import queue
import statistics
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from speakwire.audio.chunk import Float32Array
from speakwire.engines.qwen3.batched_talker import BatchedTalker
from speakwire.engines.qwen3.chunk_schedule import CodecChunkSchedule, end_chunks
from speakwire.engines.qwen3.decode_batcher import DecodeBatcher, DecodeJob
from speakwire.engines.qwen3.frame_budget import MAX_FRAMES, budget_for, frame_budget, wide_chars
from speakwire.engines.qwen3.sampling import RowSampling, sample_rows
from speakwire.engines.qwen3.static_step import StaticStep
from speakwire.engines.qwen3.stream_decoder import StreamDecoder
from speakwire.engines.qwen3.stream_sync import StepEvents, step_events
from speakwire.engines.qwen3.talker_prompt import PromptBuilder, VoicePrompt, VoiceSpec
from speakwire.engines.qwen3.text_track import TextTrack

logger = logging.getLogger(__name__)

FAILED_STEPS_UNHEALTHY = 3
"""Consecutive failed steps after which the loop reports itself unhealthy (``health_error``)."""

FRAME_S = 0.08
"""Audio per codec frame (12.5 Hz)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One 80 ms codec frame of a row."""

    codes: Any
    """(16,) long tensor on the model's device."""
    text_read: int
    """Characters of the row's text the talker had read when it made this frame."""
    ready: Any = None
    """On CUDA, the event the loop recorded right after the step that made ``codes`` (on the step's stream):
    code2wav waits on it, not on the loop's stream (``stream_sync``); None on CPU."""
    chunk_end: bool = False
    """The row's code2wav chunk ends with this frame (``chunk_schedule``; only for rows submitted with
    ``chunks``): the frames since the last one decode now, together with the other rows of this step."""
    step: int = 0
    """The loop step that made the frame."""


@dataclass(frozen=True, slots=True)
class RowEnd:
    """The row is over; ``reason`` is eos, capped, cancelled or error."""

    reason: str
    error: BaseException | None = None


RowEvent = Frame | RowEnd


class RowOutput(Protocol):
    """Where a decoded row's audio goes (``Qwen3TextStream``); the loop and code2wav call it, never wait on it."""

    def chunk(self, audio: Float32Array | None, error: BaseException | None, text_read: int) -> None:
        """A chunk's audio, or why its decode failed; ``text_read``: characters of the row's text the talker
        had read at its last frame (code2wav's thread, in order)."""
        ...

    def ended(self, end: RowEnd) -> None:
        """The row is over, after its last chunk (code2wav's thread)."""
        ...

    def read_all(self) -> None:
        """The talker has read all of the row's text, and it was finished: only its last words are left to
        speak (the loop's thread, once)."""
        ...


class Row:
    """One utterance in the loop, seen from its caller: feed text, read frames, cancel."""

    def __init__(
        self,
        loop: GenerationLoop,
        voice: VoiceSpec,
        sampling: RowSampling,
        seed: int,
        max_new_tokens: int | None,
        chunks: Sequence[int] | None = None,
        stream: object = None,
        output: RowOutput | None = None,
        decoder: StreamDecoder | None = None,
        cancel_event: threading.Event | None = None,
    ) -> None:
        self.voice = voice
        self.chunks = tuple(chunks) if chunks else None
        """Frames per code2wav chunk (the last repeats) when the row's frames are decoded in chunks."""
        self.stream = stream
        """The utterance the row speaks part of (``CodecChunkSchedule.stream``)."""
        self.sampling = sampling
        self.seed = seed
        self.max_new_tokens = max_new_tokens
        self.max_frames = frame_budget("", max_new_tokens)
        """The runaway budget for the text received so far (``frame_budget``); it grows with the text."""
        self.output = output
        """Where the row's decoded audio goes; None: raw frames to ``events``."""
        self.decoder = decoder
        """The row's code2wav history (with ``output``)."""
        self.events: queue.SimpleQueue[RowEvent] = queue.SimpleQueue()
        """Frames, then the end, of a row without an output (tests and benchmarks read codes here)."""
        self.track = TextTrack(loop.prompts.tokenize)
        self._loop = loop
        self._lock = threading.Lock()
        """Guards the track for the loop thread's reads; held only to swap in what a feed computed."""
        self._feeding = threading.Lock()
        """Orders this row's feeds and finish; the loop thread never takes it."""
        self._wide = 0
        """Wide characters of the text so far (``frame_budget``), counted piece by piece."""
        self._cancelled = False
        self._cancel_event = cancel_event
        """The request's cancel: the loop sees it set at its next step, with nobody watching it meanwhile."""
        self.ended = False
        self.held = False
        """Sits out every step (``hold``): its reader is a whole lead behind."""
        self.text_end: int | None = None
        """Characters of its text once finished (trailing space dropped); None while text may still come."""

    def feed(self, text: str) -> None:
        """More target text (an LLM's next words); tokens reach the running generation as they become final.

        The text is tokenized with no lock held that the loop thread takes: the loop reads every row's track
        each step (``text_state``), and a step must not wait for a feed's tokenizer call. ``_feeding`` keeps
        one row's feeds and finish in order.
        """
        with self._feeding:
            before = len(self.track.text)
            commit = self.track.prepare_feed(text)
            chars = len(commit.text)
            while chars and commit.text[chars - 1].isspace():
                chars -= 1
            with self._lock:
                added = self.track.apply(commit)
            self._wide += wide_chars(commit.text[before:])
            self.max_frames = budget_for(chars, self._wide, self.max_new_tokens)
        if added:
            self._loop.wake()

    def finish(self) -> None:
        """No more text: the talker may now read the end of the text."""
        with self._feeding:
            commit = self.track.prepare_finish()
            with self._lock:
                self.track.apply(commit)
            self.text_end = len(self.track.text.rstrip())
        self._loop.wake()

    def hold(self) -> None:
        """Sit out from the next step on, until ``release`` (the reader is a whole lead behind)."""
        self.held = True

    def release(self) -> None:
        """Step again."""
        self.held = False
        self._loop.wake()

    def cancel(self) -> None:
        """Stop generating; the slot is free before the next step."""
        self._cancelled = True
        self._loop.wake()

    @property
    def cancelled(self) -> bool:
        return self._cancelled or (self._cancel_event is not None and self._cancel_event.is_set())

    def text_state(self) -> tuple[list[int], bool]:
        with self._lock:
            return list(self.track.ids), self.track.done

    def text_read(self, tokens: int) -> int:
        with self._lock:
            return self.track.char_position(tokens)


@dataclass(slots=True)
class _Active:
    """Loop-side state of a row that holds a slot."""

    row: Row
    slot: int
    voice: VoicePrompt
    generator: Any
    track: list[Any] = field(default_factory=list)
    """Per track position, its (1, 1, D) text embedding (computed as tokens arrive)."""
    prefix_tokens: int = 0
    """Track tokens before the target text (ICL: the reference transcript)."""
    consumed: int = 0
    """Track positions the prompt consumed; the next step reads position ``consumed + steps``."""
    length: int = 0
    """Positions written to the slot."""
    steps: int = 0
    running: bool = False
    """The prompt is done: the row's next code, hidden state and seen codes are in its slot of ``StaticStep``."""
    frames: int = 0
    first_frame_at: float | None = None
    prompt: Any = None
    """Prompt embeddings still to run (chunked prefill); None once running."""
    chunks: CodecChunkSchedule | None = None
    """Where the row's code2wav chunks end (``Frame.chunk_end``); None for a row read frame by frame."""
    pending: list[Any] = field(default_factory=list)
    """Codes of the frames since its last chunk end (a row with an output)."""
    told_read_all: bool = False

    def lead_s(self, now: float) -> float:
        """Audio produced beyond what a real-time listener has played since the first frame."""
        if self.first_frame_at is None:
            return 0.0
        return self.frames * FRAME_S - (now - self.first_frame_at)


RECENT_STEPS = 2048
"""Steps whose duration and start gap ``LoopStats`` keeps for its percentiles."""


@dataclass(slots=True)
class LoopStats:
    steps: int = 0
    rows_stepped: int = 0
    step_s: float = 0.0
    prefills: int = 0
    prefill_s: float = 0.0
    max_batch: int = 0
    turns: int = 0
    """Times the loop thread looked for work (each wake-up counts one): an idle loop adds none."""
    recent_step_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_STEPS))
    recent_gap_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_STEPS))
    """Seconds between the starts of consecutive steps with no sleep between them: a step's own time plus what
    the loop thread did (prefills, hand-overs) or waited for (the GIL) before the next."""
    recent_host_gap_s: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_STEPS))
    """The same gaps less the admissions and prompts run in them: a step's own time plus the host's overhead
    and waits (what a thread per stream or a poller would add to), without the new rows' voice prompts and
    prefills (device work that ``prefill_budget`` bounds)."""

    def step_percentiles(self) -> dict[str, float]:
        """The median recent step and the 99th percentile of the recent gaps between step starts (seconds)."""
        steps, gaps = list(self.recent_step_s), list(self.recent_gap_s)
        host_gaps = list(self.recent_host_gap_s)
        return {
            "step_p50_seconds": statistics.median(steps) if steps else 0.0,
            "step_gap_p50_seconds": statistics.median(gaps) if gaps else 0.0,
            "step_gap_p99_seconds": _percentile(gaps, 0.99),
            "step_host_gap_p99_seconds": _percentile(host_gaps, 0.99),
        }

    def snapshot(self) -> dict[str, float]:
        return {
            "steps": self.steps,
            "mean_batch": self.rows_stepped / self.steps if self.steps else 0.0,
            "mean_step_ms": 1000 * self.step_s / self.steps if self.steps else 0.0,
            "prefills": self.prefills,
            "mean_prefill_ms": 1000 * self.prefill_s / self.prefills if self.prefills else 0.0,
            "max_batch": self.max_batch,
        }


class GenerationLoop:
    """The device-owning step loop over up to ``talker.cache.slots`` concurrent utterances."""

    def __init__(
        self,
        tts: Any,
        talker: BatchedTalker,
        prompts: PromptBuilder,
        *,
        prefill_chunk: int = 256,
        prefill_budget: int = 512,
        prefill_pack: int = 2048,
        max_lead_s: float = 2.0,
        decoding: DecodeBatcher | None = None,
    ) -> None:
        import torch

        self._torch = torch
        self.talker = talker
        self.prompts = prompts
        config = tts.model.config.talker_config
        self._eos = int(config.codec_eos_token_id)
        self._vocab = int(config.vocab_size)
        self._device = tts.model.talker.device
        banned = torch.zeros(self._vocab, dtype=torch.bool, device=self._device)
        banned[self._vocab - 1024 :] = True
        banned[self._eos] = False
        self._banned = banned
        self._true = torch.ones(1, dtype=torch.bool, device=self._device)
        self.state = StaticStep(tts, talker.cache, banned=banned, eos=self._eos)
        """Every row's step state, on the device, one entry per slot; its step is the loop's step."""
        self.step_events: StepEvents = step_events(torch, self._device)
        """Records each step's event for its frames (``Frame.ready``); none on CPU."""
        self.decoding = decoding
        """Code2wav, for rows submitted with an output."""
        self.prefill_chunk = prefill_chunk
        """Most prompt positions in one forward."""
        self.prefill_budget = prefill_budget
        """Prompt positions run per turn while other rows are generating."""
        self.prefill_pack = prefill_pack
        """Most padded positions (rows × longest chunk) in one prompt forward."""
        self.max_lead_s = max_lead_s
        """A row this far ahead of real time sits out while another is less than a quarter of it ahead: which
        rows a step serves first, not flow control (that is the reader's lead, ``Row.hold``)."""
        self._cond = threading.Condition()
        self._woken = False
        """Something changed since the loop last looked (under ``_cond``): it looks again before it sleeps."""
        self._incoming: list[Row] = []
        self._waiting: list[Row] = []
        self._active: dict[Row, _Active] = {}
        self._free = list(range(talker.cache.slots))
        heapq.heapify(self._free)
        self._closed = False
        self._last_step_start: float | None = None
        """When the last step started, unless the loop slept since (``LoopStats.recent_gap_s``)."""
        self._prompts_since_step = 0.0
        """Seconds spent admitting rows and running their prompts since the last step started
        (``LoopStats.recent_host_gap_s``)."""
        self._thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self.stats = LoopStats()
        self.failed_steps = 0
        """Consecutive steps that raised; a step that works resets it."""
        self.health_error: str | None = None
        """Set once ``FAILED_STEPS_UNHEALTHY`` steps in a row failed (the device is likely broken); it stays."""

    # ----- caller side ----------------------------------------------------------------------

    @property
    def slots(self) -> int:
        return self.talker.cache.slots

    @property
    def active_rows(self) -> int:
        with self._cond:
            return len(self._active) + len(self._waiting) + len(self._incoming)

    @property
    def free_slots(self) -> int:
        with self._cond:
            return len(self._free)

    def submit(
        self,
        voice: VoiceSpec,
        sampling: RowSampling,
        *,
        seed: int,
        max_new_tokens: int | None = None,
        chunks: Sequence[int] | None = None,
        stream: object = None,
        output: RowOutput | None = None,
        decoder: StreamDecoder | None = None,
        cancel_event: threading.Event | None = None,
    ) -> Row:
        """A new utterance; it starts once it has a slot and its first text token.

        ``chunks``: frames per code2wav chunk (the last repeats), when its frames are decoded in chunks: the
        loop then marks where each chunk ends (``Frame.chunk_end``), aligned with other streams' rows.
        ``stream``: what the row's audio is part of (rows of one utterance do not align with each other).
        ``output`` (with ``chunks`` and ``decoder``): the loop decodes the row's chunks with code2wav and
        hands the audio there; without one, its frames go to ``Row.events``. ``cancel_event``: the request's
        cancel, which ends the row at the next step as ``Row.cancel`` does."""
        if chunks is not None:
            CodecChunkSchedule(chunks)  # a bad schedule fails here, in the caller, not in the loop
        if output is not None and (chunks is None or decoder is None or self.decoding is None):
            raise ValueError("a row with an output needs chunks, a decoder and a loop with code2wav")
        row = Row(self, voice, sampling, seed, max_new_tokens, chunks, stream, output, decoder, cancel_event)
        with self._cond:
            if self._closed:
                raise RuntimeError("generation loop is closed")
            self._idle.clear()
            self._incoming.append(row)
            self._woken = True
            self._cond.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="qwen3-generation-loop", daemon=True)
                self._thread.start()
        return row

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until no utterance is left and the loop thread holds nothing of the last one."""
        return self._idle.wait(timeout)

    def capture_graphs(self) -> float:
        """Record the static step of every batch bucket as a CUDA graph; call before the first row. Seconds taken."""
        return float(self.state.capture())

    def wake(self) -> None:
        with self._cond:
            self._woken = True
            self._cond.notify()

    def close(self) -> None:
        """End every row (cancelled) and stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)

    # ----- the loop -------------------------------------------------------------------------

    def _run(self) -> None:
        torch = self._torch
        with torch.no_grad():
            while True:
                with self._cond:
                    if self._closed:
                        break
                    self._woken = False
                    self.stats.turns += 1
                    self._waiting.extend(self._incoming)
                    self._incoming.clear()
                self._drop_cancelled()
                started = time.perf_counter()
                progressed = self._admit()
                self._prompts_since_step += time.perf_counter() - started
                progressed = self._continue_prefills() or progressed
                progressed = self._step() or progressed
                if not progressed:
                    with self._cond:
                        if not self._woken and not self._incoming and not self._closed:
                            if not self._active and not self._waiting:
                                self._idle.set()
                            self._last_step_start = None
                            self._cond.wait()  # feed, finish, cancel, release, submit and close wake it
        for row in [*self._waiting, *self._incoming, *self._active]:
            self._end(row, RowEnd("cancelled"))

    def _drop_cancelled(self) -> None:
        for row in [r for r in self._waiting if r.cancelled]:
            self._waiting.remove(row)
            self._end(row, RowEnd("cancelled"))
        for row in [r for r in self._active if r.cancelled]:
            self._end(row, RowEnd("cancelled"))

    def _end(self, row: Row, end: RowEnd) -> None:
        active = self._active.pop(row, None)
        if active is not None:
            self.state.release(active.slot)
            heapq.heappush(self._free, active.slot)
        if not row.ended:
            row.ended = True
            output = row.output
            if output is None:
                row.events.put(end)
                return
            assert self.decoding is not None
            # Through code2wav, so that the end reaches the output after the row's last chunk.
            self.decoding.submit([DecodeJob(row, None, None, None, lambda _audio, _error: output.ended(end))])

    def _admit(self) -> bool:
        """Give free slots to waiting rows whose text can start a prompt, oldest first."""
        admitted = False
        for row in list(self._waiting):
            if not self._free:
                break
            ids, done = row.text_state()
            if not ids and not done:
                continue
            self._waiting.remove(row)
            if not ids:
                self._end(row, RowEnd("eos"))
                continue
            slot = heapq.heappop(self._free)
            try:
                voice = self.prompts.voice(row.voice)
            except Exception as exc:
                logger.exception("qwen3: could not build the voice prompt")
                heapq.heappush(self._free, slot)
                self._end(row, RowEnd("error", exc))
                continue
            generator = self._torch.Generator(device=self._device).manual_seed(int(row.seed))
            active = _Active(row, slot, voice, generator, prefix_tokens=len(voice.track_prefix_ids))
            active.chunks = CodecChunkSchedule(row.chunks, row.stream) if row.chunks else None
            self._active[row] = active  # from here on, _end frees the slot
            try:
                self._start_prompt(active, ids, done)  # False: an ICL row waits for text, keeping its slot
            except Exception as exc:
                self._end(row, RowEnd("error", exc))
            admitted = True
        return admitted

    def _start_prompt(self, active: _Active, ids: list[int], done: bool) -> bool:
        """Build the row's prompt once its text allows; False while an ICL row still waits for text."""
        torch, prompts, voice = self._torch, self.prompts, active.voice
        if voice.icl:
            track_ids = voice.track_prefix_ids + ids
            if len(track_ids) < voice.tokens_in_prompt and not done:
                return False
            track = prompts.text_embeddings(track_ids)
            if done:
                track = torch.cat((track, prompts.tts_eos), dim=1)
            active.track = [track[:, i : i + 1] for i in range(track.shape[1])]
            prompt, active.consumed = prompts.prompt(voice, track)
        else:
            # The package's grouping: the first token alone, the rest (+ EOS) in one projection.
            first = prompts.text_embeddings(ids[:1])
            prompt, active.consumed = prompts.prompt(voice, first)
            active.track = [first]
            self._extend_track(active, ids, done)
        max_len = self.talker.cache.max_len
        longest = min(MAX_FRAMES, active.row.max_new_tokens or MAX_FRAMES)
        if prompt.shape[1] + longest // 4 > max_len:
            raise ValueError(
                f"the prompt ({prompt.shape[1]} positions) leaves too little of the talker's per-utterance "
                f"context ({max_len} positions) for speech; shorten the instructions or the reference"
            )
        active.prompt = prompt
        return True

    def _extend_track(self, active: _Active, ids: list[int], done: bool) -> None:
        """Embed newly committed text tokens (and the text EOS once the text is complete)."""
        prompts = self.prompts
        have = len(active.track) - active.prefix_tokens
        tail_known = len(active.track) > active.prefix_tokens + len(ids)  # EOS already appended
        if tail_known:
            return
        new = ids[have:]
        if new:
            embeds = prompts.text_embeddings(new)
            if done:
                embeds = self._torch.cat((embeds, prompts.tts_eos), dim=1)
            active.track.extend(embeds[:, i : i + 1] for i in range(embeds.shape[1]))
        elif done:
            active.track.append(prompts.tts_eos)

    def _continue_prefills(self) -> bool:
        """Run prompts, oldest first: all of them when nothing else runs, else ``prefill_budget`` tokens a turn.

        Prompts are cheap next to what running rows need per step, so a burst of new streams starts within
        a few turns instead of one stream per turn, while running rows wait at most one budget per step.
        The next chunks of several prompts run as one padded forward (``BatchedTalker.prefill_rows``), up to
        ``prefill_pack`` padded positions: a burst of 16 short prompts is one forward, not 16.
        """
        progressed = False
        running = any(a.running for a in self._active.values())
        budget = self.prefill_budget if running else None
        while budget is None or budget > 0:
            pending = [a for a in self._active.values() if a.prompt is not None and not a.row.cancelled]
            if not pending:
                break
            group: list[tuple[_Active, int]] = []
            cost = 0
            for active in pending:
                take = self._chunk_size(active)
                longest = max([take] + [t for _, t in group])
                if group and (longest * (len(group) + 1) > self.prefill_pack
                              or (budget is not None and cost + take > budget)):  # fmt: skip
                    break
                group.append((active, take))
                cost += take
            started = time.perf_counter()
            try:
                self._prefill_group(group)
            except Exception as exc:
                logger.exception("qwen3: prompt failed")
                for active, _ in group:
                    self._end(active.row, RowEnd("error", exc))
            took = time.perf_counter() - started
            self.stats.prefills += len(group)
            self.stats.prefill_s += took
            self._prompts_since_step += took
            progressed = True
            if budget is not None:
                budget -= cost
        # ICL rows that were waiting for text
        for active in [a for a in self._active.values() if a.prompt is None and not a.running]:
            ids, done = active.row.text_state()
            try:
                if self._start_prompt(active, ids, done):
                    progressed = True
            except Exception as exc:
                self._end(active.row, RowEnd("error", exc))
        return progressed

    def _chunk_size(self, active: _Active) -> int:
        left = int(active.prompt.shape[1]) - active.length
        return left if self.prefill_chunk <= 0 else min(left, self.prefill_chunk)

    def _prefill_group(self, group: list[tuple[_Active, int]]) -> None:
        """The next chunk of each row's prompt, in one forward; rows whose prompt is done get their first code."""
        chunks = [a.prompt[:, a.length : a.length + take] for a, take in group]
        if len(group) == 1:
            active = group[0][0]
            logits, hidden = self.talker.prefill(active.slot, chunks[0], active.length)
        else:
            logits, hidden = self.talker.prefill_rows([a.slot for a, _ in group], chunks, [a.length for a, _ in group])
        for i, (active, take) in enumerate(group):
            active.length += take
            if active.length >= active.prompt.shape[1]:
                self._first_code(active, logits[i : i + 1], hidden[i : i + 1])

    def _first_code(self, active: _Active, logits: Any, hidden: Any) -> None:
        torch = self._torch
        active.prompt = None
        code = sample_rows(
            torch,
            logits,
            [active.row.sampling.talker],
            [active.generator],
            seen=torch.zeros(1, self._vocab, dtype=torch.bool, device=self._device),
            banned=self._banned,
            eos_blocked=self._true,
            eos=self._eos,
        )
        self.state.start_row(active.slot, active.row.sampling, hidden, code, active.length)
        active.running = True

    # ----- one frame for every row that can take it ---------------------------------------

    def _ready(self, now: float) -> list[_Active]:
        rows = []
        for active in self._active.values():
            if active.prompt is not None or not active.running or active.row.cancelled or active.row.held:
                continue
            ids, done = active.row.text_state()
            self._extend_track(active, ids, done)
            position = active.consumed + active.steps
            if position >= len(active.track) and not done:
                continue  # the talker has read all the text that has arrived: wait for more
            rows.append(active)
        if len(rows) > 1 and self.max_lead_s > 0:
            behind = any(a.lead_s(now) < self.max_lead_s / 4 for a in rows)
            if behind:
                rows = [a for a in rows if a.lead_s(now) <= self.max_lead_s]
        return rows

    def _step(self) -> bool:
        now = time.monotonic()
        rows = self._ready(now)
        if not rows:
            return False
        started = time.perf_counter()
        if self._last_step_start is not None:
            gap = started - self._last_step_start
            self.stats.recent_gap_s.append(gap)
            self.stats.recent_host_gap_s.append(gap - self._prompts_since_step)
        self._last_step_start = started
        self._prompts_since_step = 0.0
        try:
            self._advance(rows)
            self.failed_steps = 0
        except Exception as exc:
            # The step's rows end with the error and free their slots; the others go on next turn.
            logger.exception("qwen3: generation step failed for %d rows", len(rows))
            for active in rows:
                if active.row in self._active:
                    self._end(active.row, RowEnd("error", exc))
            self.failed_steps += 1
            if self.failed_steps >= FAILED_STEPS_UNHEALTHY and self.health_error is None:
                self.health_error = f"{self.failed_steps} generation steps in a row failed: {type(exc).__name__}: {exc}"
                logger.error("qwen3: the engine is unhealthy: %s", self.health_error)
        stats = self.stats
        stats.steps += 1
        stats.rows_stepped += len(rows)
        took = time.perf_counter() - started
        stats.step_s += took
        stats.recent_step_s.append(took)
        stats.max_batch = max(stats.max_batch, len(rows))
        return True

    def _advance(self, rows: list[_Active]) -> None:
        """One step of ``StaticStep``: no host-built tensor, one read-back of the codes."""
        state = self.state
        span = max(a.length for a in rows) + 1
        frames, codes = state.run([(a.slot, self._text_at(a), a.row.sampling, a.generator) for a in rows], span)
        column = state.codebooks
        next_codes = [int(codes[a.slot, column]) for a in rows]
        self._emit(rows, [frames[a.slot] for a in rows], self.step_events.record(), next_codes)
        self._finish_step(rows, next_codes)

    def _emit(self, rows: list[_Active], frames: list[Any], ready: Any, next_codes: list[int]) -> None:
        """Each row's frame of this step: to code2wav at its chunk ends (all of this step's in one hand-over),
        or to its ``events``; ``next_codes``: the codes the step sampled next (a row that ends now ends its
        chunk with this frame)."""
        now = time.monotonic()
        step = self.stats.steps
        last = [self._ends_after(a, code) for a, code in zip(rows, next_codes, strict=True)]
        ends = end_chunks([a.chunks for a in rows], last)
        jobs: list[DecodeJob] = []
        for active, codes, end in zip(rows, frames, ends, strict=True):
            if active.first_frame_at is None:
                active.first_frame_at = now
            active.frames += 1
            row = active.row
            text_read = row.text_read(max(0, active.consumed + active.steps - active.prefix_tokens))
            output = row.output
            if output is None:
                row.events.put(Frame(codes, text_read, ready, end, step))
                continue
            active.pending.append(codes)
            if end:
                chunk, active.pending = active.pending, []
                jobs.append(DecodeJob(row, row.decoder, chunk, ready, _chunk_done(output, text_read), row.stream))
            if not active.told_read_all and row.text_end is not None and text_read >= row.text_end:
                active.told_read_all = True
                output.read_all()
        if jobs:
            assert self.decoding is not None
            self.decoding.submit(jobs)

    def _ends_after(self, active: _Active, code: int) -> bool:
        """Whether the row ends after its frame of this step (before ``_emit`` counts it)."""
        return (
            code == self._eos
            or active.frames + 1 >= active.row.max_frames
            or active.length + 2 >= self.talker.cache.max_len
        )

    def _finish_step(self, rows: list[_Active], codes: list[int]) -> None:
        for active, code in zip(rows, codes, strict=True):
            active.length += 1
            active.steps += 1
            if code == self._eos:
                self._end(active.row, RowEnd("eos"))
            elif active.frames >= active.row.max_frames or active.length + 1 >= self.talker.cache.max_len:
                self._end(active.row, RowEnd("capped"))

    def _text_at(self, active: _Active) -> Any:
        position = active.consumed + active.steps
        if position < len(active.track):
            return active.track[position]
        return self.prompts.tts_pad


def _chunk_done(output: RowOutput, text_read: int) -> Any:
    """A code2wav callback handing one chunk's audio (or its error) to the row's output."""

    def done(audio: Float32Array | None, error: BaseException | None) -> None:
        output.chunk(audio, error, text_read)

    return done


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]
