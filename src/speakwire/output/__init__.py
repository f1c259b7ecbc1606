"""The output stage: an utterance's events become what leaves the server, once for every protocol.

``AudioOut`` is the one loop over ``Utterance.events()``: it encodes audio in the requested codec and
framing (off the event loop for the FFmpeg codecs), places word timings on the output's timeline and
hands each protocol ``OutputPart`` values (``parts``) to map to its wire messages. Flow control stays
where it is: the stage asks the utterance for its next event only after the protocol has written the
part before it. An aligner's words come as a ``WordsPart`` that refers back to its segment (audio never
waits for them); ``words_at_segment_end`` is for the one wire shape that binds them to the segment's end.
"""

from speakwire.output.parts import AudioPart, OutputPart, SegmentEnd, SegmentStart, UtteranceEnd, WordsPart
from speakwire.output.stage import AudioOut, Framing, OutputSpec
from speakwire.output.word_order import words_at_segment_end

__all__ = [
    "AudioOut",
    "AudioPart",
    "Framing",
    "OutputPart",
    "OutputSpec",
    "SegmentEnd",
    "SegmentStart",
    "UtteranceEnd",
    "WordsPart",
    "words_at_segment_end",
]
