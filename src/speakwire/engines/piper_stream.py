"""Frame-space streaming for a split Piper voice: the frontend once per sentence, the decoder in windows.

Why: the decoder (flow → HiFi-GAN) is most of the compute and only looks a bounded number of frames
either way, so a sentence's first audio can exist after the frontend plus one small window instead of
after the whole sentence. Each window decodes its frames with ``left``/``right`` frames of context
on either side and keeps only its own samples, so the windows concatenate to the full decode.

Context, measured on ``en_US-joe-medium`` by perturbing one frame of ``z_p``: the decoder's receptive
field is exactly ±43 frames (the flow's four couplings of four kernel-5 layers give ±32, HiFi-GAN
the rest), but frames beyond ±30 change the output by < 1e-6, so 32 frames of context on each side
are enough. What differences remain against a full decode (≤ 4e-5 on real sentences, one 16-bit step
on ~0.1% of samples) are rounding, not missing context: three real sentences differ from a full decode
by at most 2.7e-5 with 32/32 and with the 48/40 used before (which decoded 15% more frames); 24/24
gives 1.6e-4. They come and go with the window's length, as onnxruntime picks its kernels by input size.

The schedule grows (24, 48, 96, 192, 256 frames, then 256 at a time; a frame is 256 samples, ~11.6
ms at 22,050 Hz): the first window is small so audio starts early, and each later one is decoded
while the audio before it plays, with fewer calls and less recomputed context per second of audio.
The overlap is recomputed (~1.2–1.6× the decoder work of one pass at sentence length). The second
window is the tight one: it decodes its frames plus 64 of context while only the first window plays.
With a 16-frame first window (and 88 frames of context) that was 120 frames of work in 0.19 s of
audio, and two streams on a busy 2-core machine stalled there (25-58 ms, every time); 24 frames never
did, and the first chunk came as soon (median 83 ms for both, p90 +7 ms; 32 frames cost +13 ms).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from speakwire.audio.chunk import Float32Array

if TYPE_CHECKING:
    import onnxruntime

    # piper.py imports this module for FrameSchedule even where the optional onnx package is missing.
    from speakwire.engines.piper_split import SplitVoice


@dataclass(frozen=True, slots=True)
class FrameSchedule:
    """How a sentence's frames are cut into decoder windows."""

    sizes: tuple[int, ...] = (24, 48, 96, 192, 256)
    """Frames per window, in order; the last size repeats until the sentence ends."""
    left: int = 32
    """Frames of context decoded before each window and discarded."""
    right: int = 32
    """Frames of context decoded after each window and discarded (each window waits for them)."""

    def __post_init__(self) -> None:
        if not self.sizes or any(size < 1 for size in self.sizes):
            raise ValueError(f"frame schedule sizes must be positive, got {self.sizes}")
        if self.left < 0 or self.right < 0:
            raise ValueError(f"frame context must be >= 0, got left={self.left} right={self.right}")

    def windows(self, frames: int) -> Iterator[tuple[int, int]]:
        """``(start, stop)`` of each window over ``frames`` frames, in order, covering every frame once."""
        start, index = 0, 0
        while start < frames:
            stop = min(start + self.sizes[min(index, len(self.sizes) - 1)], frames)
            yield start, stop
            start, index = stop, index + 1


@dataclass(frozen=True, slots=True)
class Latent:
    """One sentence's frontend output: ``z_p`` and what the decoder reads with it."""

    values: Mapping[str, npt.NDArray[Any]]
    """Decoder input name → array, as the frontend returned them."""
    frames: int
    durations: npt.NDArray[Any] | None = None
    """Frames per phoneme id (the duration predictor's ``w_ceil``), when the split voice exposes them."""

    def window(self, low: int, high: int) -> dict[str, npt.NDArray[Any]]:
        """Decoder feed for frames ``[low, high)``: per-frame tensors sliced, the rest (speaker) whole."""
        return {
            name: value[..., low:high] if value.ndim and value.shape[-1] == self.frames else value
            for name, value in self.values.items()
        }


class FrameStreamer:
    """Runs a split voice; thread-safe (onnxruntime sessions are, and no state is kept between calls)."""

    def __init__(
        self,
        voice: SplitVoice,
        session_options: onnxruntime.SessionOptions,
        schedule: FrameSchedule,
        run_options: onnxruntime.RunOptions | None = None,
    ) -> None:
        import onnxruntime

        self._run_options = run_options

        self.boundary = voice.boundary
        self.schedule = schedule
        providers = ["CPUExecutionProvider"]
        self._frontend = onnxruntime.InferenceSession(voice.frontend, sess_options=session_options, providers=providers)
        self._decoder = onnxruntime.InferenceSession(voice.decoder, sess_options=session_options, providers=providers)

    @property
    def hop_length(self) -> int:
        return self.boundary.hop_length

    def frontend(self, feed: Mapping[str, npt.NDArray[Any]]) -> Latent:
        """Run the frontend on one sentence (all of its noise is drawn here, once)."""
        feed = {name: value for name, value in feed.items() if name in self.boundary.frontend_inputs}
        names = list(self.boundary.decoder_inputs)
        durations = self.boundary.durations
        outputs = self._frontend.run(names + ([durations] if durations else []), feed, self._run_options)
        values = dict(zip(names, outputs[: len(names)], strict=True))
        frames = np.asarray(outputs[len(names)]).reshape(-1) if durations else None
        return Latent(values, int(values[self.boundary.latent].shape[-1]), frames)

    def decode(self, latent: Latent, start: int, stop: int, schedule: FrameSchedule | None = None) -> Float32Array:
        """Samples of frames ``[start, stop)``, equal to that slice of a full decode (context from ``schedule``)."""
        schedule = schedule or self.schedule
        low = max(0, start - schedule.left)
        high = min(latent.frames, stop + schedule.right)
        (audio,) = self._decoder.run([self.boundary.audio], latent.window(low, high), self._run_options)
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if len(samples) != (high - low) * self.hop_length:
            raise RuntimeError(
                f"decoder returned {len(samples)} samples for {high - low} frames; expected hop {self.hop_length}"
            )
        return samples[(start - low) * self.hop_length : (stop - low) * self.hop_length]

    def stream(
        self, feed: Mapping[str, npt.NDArray[Any]], cancelled: threading.Event | None = None
    ) -> Iterator[Float32Array]:
        """One sentence: the frontend, then each window's samples as soon as it is decoded.

        Stops before the next decoder call once ``cancelled`` is set.
        """
        yield from self.windows(self.frontend(feed), cancelled)

    def windows(
        self, latent: Latent, cancelled: threading.Event | None = None, schedule: FrameSchedule | None = None
    ) -> Iterator[Float32Array]:
        """Each window's samples of a sentence whose frontend already ran; stops once ``cancelled`` is set.

        ``schedule`` overrides the streamer's own (the engine's bounded-memory windows for later sentences).
        """
        schedule = schedule or self.schedule
        for start, stop in schedule.windows(latent.frames):
            if cancelled is not None and cancelled.is_set():
                return
            yield self.decode(latent, start, stop, schedule)
