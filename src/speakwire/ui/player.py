"""The streaming audio player: gradio's ``Audio`` fed the ADTS segments made by ``speakwire.ui.stream``.

Gradio's own ``Audio.stream_output`` hands every chunk to the ``ffmpeg`` program. This player takes the
segments as they are and only tells gradio how long each one is, so the page needs no ffmpeg and the
playlist's durations are those of the frames that play; the download is the same frames as one ``.aac``
file. The two methods are replaced on the instance rather than in a subclass: gradio writes a ``.pyi``
stub beside the source file of every ``Component`` subclass it sees, into the source tree or
site-packages. Used only once ``speakwire.ui.app.import_gradio`` has imported and set up gradio.
"""

from __future__ import annotations

from types import MethodType
from typing import TYPE_CHECKING, Any

from speakwire.ui.stream import adts_duration

if TYPE_CHECKING:
    from gradio import Audio
    from gradio.data_classes import FileData, FileDataDict, MediaStreamChunk

DOWNLOAD_NAME = "speech.aac"


def speech_player(**options: Any) -> Audio:
    """``gr.Audio(streaming=True, **options)`` whose streamed values are ADTS AAC segments (bytes)."""
    import gradio as gr

    player = gr.Audio(streaming=True, **options)
    vars(player).update(stream_output=MethodType(_stream_output, player),
                        combine_stream=MethodType(_combine_stream, player))  # fmt: skip
    return player


async def _stream_output(
    player: Audio, value: Any, output_id: str, first_chunk: bool
) -> tuple[MediaStreamChunk | None, FileDataDict]:
    """One segment for the playlist, as given, with the duration of its frames."""
    output_file: FileDataDict = {"path": output_id, "is_stream": True, "orig_name": DOWNLOAD_NAME,
                                 "meta": {"_type": "gradio.FileData"}}  # fmt: skip
    if value is None:  # the run is over; its last segment came with the generator's last yield
        return None, output_file
    if not isinstance(value, bytes):
        raise TypeError(f"the speech player streams ADTS segments (bytes), not {type(value).__name__}")
    return {"data": value, "duration": adts_duration(value), "extension": ".aac"}, output_file


async def _combine_stream(
    player: Audio, stream: list[bytes], desired_output_format: str | None = None, only_file: bool = False
) -> FileData:
    """The whole stream for the download button: the segments joined, which is one ADTS file."""
    from gradio import processing_utils
    from gradio.data_classes import FileData

    path = processing_utils.save_bytes_to_cache(b"".join(stream), DOWNLOAD_NAME, cache_dir=player.GRADIO_CACHE)
    return FileData(path=path, is_stream=False, orig_name=DOWNLOAD_NAME)
