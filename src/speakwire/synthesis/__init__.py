"""The one synthesis pipeline: text (whole or incremental) → segment → normalize → engine → resample.

A protocol asks ``SynthesisPipeline.utterance`` for an ``Utterance``, feeds it text, says when input is done
and iterates its events (``events``); ``cancel()`` stops the work between engine chunks and ends the events
at once. The package, one idea per module:

  * ``pipeline``: admission, and the one choice of driver from the engine's kind;
  * ``utterance``: what a protocol drives; input, events, usage, cancel and flow control (the bounded lead);
  * ``driver``: the interface between an utterance and a way of driving an engine;
  * ``segment_driver``: one generation per sentence segment through the scheduler (Piper);
  * ``stream_driver``: text streamed into one running generation (Qwen3), labelled by ``sentence_labels``;
  * ``aligning``: word timings from an aligner, each sentence aligned once its audio is final;
  * ``events``, ``observer``, ``progress`` (the playback clock), ``numbering`` (segments per utterance).
"""

from speakwire.synthesis.events import (
    AudioReady,
    SegmentFinished,
    SegmentStarted,
    SegmentWords,
    Usage,
    UtteranceEvent,
    UtteranceFinished,
)
from speakwire.synthesis.observer import PipelineObserver
from speakwire.synthesis.pipeline import DEFAULT_MAX_LEAD_S, OVERLOAD_LATENESS_S, SynthesisPipeline
from speakwire.synthesis.segment_driver import LATENCY_CRITICAL_BUFFER_S, STREAM_MARGIN_S
from speakwire.synthesis.utterance import Utterance

__all__ = [
    "DEFAULT_MAX_LEAD_S",
    "LATENCY_CRITICAL_BUFFER_S",
    "OVERLOAD_LATENESS_S",
    "STREAM_MARGIN_S",
    "AudioReady",
    "PipelineObserver",
    "SegmentFinished",
    "SegmentStarted",
    "SegmentWords",
    "SynthesisPipeline",
    "Usage",
    "Utterance",
    "UtteranceEvent",
    "UtteranceFinished",
]
