"""The output stage: an utterance's events become what leaves the server, once for every protocol.

``AudioOut`` is the one loop over ``Utterance.events()``: it encodes audio in the requested codec and
framing (off the event loop for the FFmpeg codecs), places word timings on the output's timeline and
hands each protocol ``OutputPart`` values (``parts``) to map to its wire messages. Flow control stays
where it is: the stage asks the utterance for its next event only after the protocol has written the
part before it.
"""

from speakwire.output.parts import AudioPart, OutputPart, SegmentEnd, SegmentStart, UtteranceEnd
from speakwire.output.stage import AudioOut, Framing, OutputSpec

__all__ = [
    "AudioOut",
    "AudioPart",
    "Framing",
    "OutputPart",
    "OutputSpec",
    "SegmentEnd",
    "SegmentStart",
    "UtteranceEnd",
]
