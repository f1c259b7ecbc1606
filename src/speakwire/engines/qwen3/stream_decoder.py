"""Exact incremental code2wav: decode codec frames as they arrive, sample-identical to one full decode.

The Qwen3-TTS 12 Hz decoder is causal, so frame ``t``'s audio depends only on
frames ``≤ t`` — but on how many of them? Two parts reach back differently:

* the **transformer** (``pre_transformer``) runs at 12.5 frames/s with sliding-window
  attention; each of its ``L`` layers looks ``W`` frames back (``W`` = 72 in the
  released tokenizer), so together they reach ``L × W`` frames (8 × 72 = 576 for
  the real model, not 72: decoding with only 72 frames of left context, as
  vLLM-Omni does, is close but not exact);
* the **convolutional upsampler/vocoder** runs at 25 Hz … 24 kHz and reaches back
  only a handful of frames (about 10 for the released tokenizer), computed below
  from the modules themselves.

So each chunk is decoded in two passes: the cheap 12.5 Hz part over
``transformer reach + conv reach`` frames of history, then the expensive
audio-rate part over only ``conv reach`` frames of history. The result is the
full decode's waveform for those frames (tested against the package's own decode
to float32 rounding), at a cost per chunk that does not grow with the utterance.

The module calls mirror ``Qwen3TTSTokenizerV2Decoder.forward`` of qwen-tts 0.1.1;
the equality test guards against drift when that pin moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from speakwire.audio.chunk import Float32Array

PRE_CONV_REACH = 2
"""``pre_conv`` is a causal convolution with kernel 3 at the frame rate."""


def transformer_reach(decoder: Any) -> int:
    """Frames of history the sliding-window transformer can see: layers × window."""
    config = decoder.config
    return int(config.num_hidden_layers) * int(config.sliding_window)


def conv_reach(decoder: Any) -> int:
    """Frames of history the audio-rate part (upsampler + vocoder) can see, from its causal convolutions.

    Walks the temporal layers in forward order, keeping track of the samples per
    frame at each stage: a causal convolution reaches back ``(kernel-1)·dilation``
    of its input samples, a causal transposed convolution ``ceil(kernel/stride)-1``.
    """
    reach = Fraction(0)
    samples_per_frame = 1
    for module in [*decoder.upsample.modules(), *decoder.decoder.modules()]:
        kind = type(module).__name__
        if kind.endswith("CausalTransConvNet"):
            conv = module.conv
            reach += Fraction(math.ceil(conv.kernel_size[0] / conv.stride[0]) - 1, samples_per_frame)
            samples_per_frame *= int(conv.stride[0])
        elif kind.endswith("CausalConvNet"):
            reach += Fraction(int(module.padding), samples_per_frame)
            samples_per_frame //= int(module.stride)  # stride 1 throughout the released decoder
    return math.ceil(reach)


@dataclass(frozen=True, slots=True)
class DecodeWindow:
    """The codes one chunk's decode needs, and how much of its output is history to drop."""

    codes: Any
    """(Q, T) long: history and new frames."""
    latent_skip: int
    """Frames of the 12.5 Hz output that only feed the audio-rate part's history."""
    wave_skip: int
    """Samples of the audio-rate output that belong to frames already returned."""

    @property
    def shape(self) -> tuple[int, int, int]:
        """Windows with the same shape decode together in one batch."""
        return int(self.codes.shape[1]), self.latent_skip, self.wave_skip


class StreamDecoder:
    """Turns codec frames into audio chunk by chunk, exactly as a single full decode would.

    Args:
        decoder: ``Qwen3TTSTokenizerV2Decoder`` (``model.speech_tokenizer.model.decoder``).
        history: Frames that precede the ones to decode but are not to be returned, ``(T, Q)``
            (the reference codes in in-context voice cloning, which the package decodes in front of
            the generated ones and cuts off).
    """

    def __init__(self, decoder: Any, history: Any = None) -> None:
        import torch

        self._torch = torch
        self._decoder = decoder
        self._conv_reach = conv_reach(decoder)
        self._latent_reach = transformer_reach(decoder) + PRE_CONV_REACH
        self._samples_per_frame = int(decoder.total_upsample)
        self._quantizers = int(decoder.config.num_quantizers)
        self._source = history
        """The history until the first window moves it to the device (on the stream that builds windows)."""
        self._frames: Any = None
        self._history = 0 if history is None else int(history.shape[0])
        self._emitted = self._history

    @property
    def frames_decoded(self) -> int:
        """Frames returned so far (history excluded)."""
        return self._emitted - self._history

    def decode(self, frames: Any) -> Float32Array:
        """Append ``frames`` ``(n, Q)`` and return their audio, ``n × 1920`` float32 samples."""
        window = self.window(frames)
        if window is None:
            return np.zeros(0, dtype=np.float32)
        return decode_windows(self._decoder, [window])[0]

    def window(self, frames: Any) -> DecodeWindow | None:
        """Append ``frames`` and return what decoding them takes (None for no frames); see ``decode_windows``.

        ``frames``: ``(n, Q)``, or a sequence of ``(Q,)`` frames (stacked here). Every tensor op of the window
        runs on the caller's current stream: in ``DecodeBatcher``, code2wav's, after its wait for the frames.
        """
        torch = self._torch
        if isinstance(frames, (list, tuple)):
            if not frames:
                return None
            frames = torch.stack(list(frames))
        device = self._decoder.device
        if self._frames is None:
            if self._source is None:
                self._frames = torch.zeros((0, self._quantizers), dtype=torch.long, device=device)
            else:
                source = self._source
                if source.is_cuda:
                    source.record_stream(torch.cuda.current_stream(source.device))  # read here, maybe made elsewhere
                self._frames = source.to(device, torch.long)
            self._source = None
        new = frames.to(device, torch.long).reshape(-1, self._quantizers)
        if new.shape[0] == 0:
            return None
        self._frames = torch.cat([self._frames, new.clamp(min=0)], dim=0)
        start, end = self._emitted, int(self._frames.shape[0])
        wave_from = max(0, start - self._conv_reach)
        latent_from = max(0, wave_from - self._latent_reach)
        self._emitted = end
        return DecodeWindow(
            self._frames[latent_from:end].T,
            wave_from - latent_from,
            (start - wave_from) * self._samples_per_frame,
        )


def largest_window(decoder: Any, frames: int) -> DecodeWindow:
    """A window as long as any chunk of ``frames`` new frames can need (full history in both parts), of zeros:
    what one window costs code2wav at most (``DecodeBatcher.measure_window_bytes``)."""
    import torch

    latent = transformer_reach(decoder) + PRE_CONV_REACH
    conv = conv_reach(decoder)
    codes = torch.zeros(
        (int(decoder.config.num_quantizers), latent + conv + frames), dtype=torch.long, device=decoder.device
    )
    return DecodeWindow(codes, latent, conv * int(decoder.total_upsample))


def decode_windows(decoder: Any, windows: list[DecodeWindow]) -> list[Float32Array]:
    """Decode windows as one batch: each row's new audio, float32 on the host.

    Windows of one shape stack as they are. Windows of different shapes (streams at different points of
    their schedule or history) are padded on the right, in both passes: the decoder is causal, so frames
    after a row's own end change nothing of what that row keeps, and each row is cut at its own skips and
    end. One call instead of one per shape is what makes code2wav batch when streams are out of step.
    """
    import torch

    first = windows[0]
    with torch.inference_mode():
        if all(window.shape == first.shape for window in windows):
            codes = torch.stack([window.codes for window in windows])  # (B, Q, T)
            latent = _latent(decoder, codes)[..., first.latent_skip :]
            wave = _waveform(decoder, latent)[:, 0, first.wave_skip :]
            host = wave.float().cpu().numpy()
            return [np.ascontiguousarray(row, dtype=np.float32) for row in host]
        lengths = [int(window.codes.shape[1]) for window in windows]
        codes = torch.stack([_pad_right(window.codes, max(lengths)) for window in windows])
        latent = _latent(decoder, codes)
        spans = [length - window.latent_skip for window, length in zip(windows, lengths, strict=True)]
        latent = torch.stack(
            [_pad_right(latent[i, :, w.latent_skip : lengths[i]], max(spans)) for i, w in enumerate(windows)]
        )
        wave = _waveform(decoder, latent)[:, 0].float().cpu().numpy()
    samples = int(decoder.total_upsample)
    return [
        np.ascontiguousarray(wave[i, window.wave_skip : span * samples], dtype=np.float32)
        for i, (window, span) in enumerate(zip(windows, spans, strict=True))
    ]


def _pad_right(tensor: Any, length: int) -> Any:
    """``tensor`` (C, T) with zeros after its last step up to ``length`` steps."""
    import torch

    missing = length - int(tensor.shape[-1])
    return tensor if missing == 0 else torch.nn.functional.pad(tensor, (0, missing))


def _latent(decoder: Any, codes: Any) -> Any:
    """The 12.5 Hz part: codebook lookup, pre-conv and the sliding-window transformer."""
    hidden = decoder.quantizer.decode(codes)
    hidden = decoder.pre_conv(hidden).transpose(1, 2)
    hidden = decoder.pre_transformer(inputs_embeds=hidden).last_hidden_state
    return hidden.permute(0, 2, 1)


def _waveform(decoder: Any, hidden: Any) -> Any:
    """The audio-rate part: upsampling ConvNeXt blocks and the vocoder."""
    for blocks in decoder.upsample:
        for block in blocks:
            hidden = block(hidden)
    for block in decoder.decoder:
        hidden = block(hidden)
    return hidden.clamp(min=-1, max=1)
