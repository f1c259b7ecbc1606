"""The embedded voice is intelligible: PocketSphinx (a real recognizer) transcribes what it says."""

from __future__ import annotations

import re

import httpx
import numpy as np
from pocketsphinx import Decoder

from support.live_server import LiveServer

SENTENCES = (
    "The weather today is sunny and warm. "
    "Please call me back when you have time. "
    "I would like to order a large pizza with cheese."
)


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def word_error_rate(reference: list[str], hypothesis: list[str]) -> float:
    """Levenshtein distance over words, divided by the reference length."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1] / len(reference)


def transcribe(pcm16k: bytes) -> str:
    decoder = Decoder(samprate=16000)
    decoder.start_utt()
    decoder.process_raw(pcm16k, full_utt=True)
    decoder.end_utt()
    return decoder.hyp().hypstr if decoder.hyp() else ""


def test_pocketsphinx_understands_the_streamed_voice(server: LiveServer) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
        "input": SENTENCES, "response_format": "pcm", "sample_rate": 16000, "stream_format": "audio"})  # fmt: skip
    assert response.status_code == 200
    transcript = transcribe(response.content)
    wer = word_error_rate(words(SENTENCES), words(transcript))
    assert wer < 0.35, f"WER {wer:.2f}: {transcript!r}"


def test_word_error_rate_of_silence_is_total(server: LiveServer) -> None:
    # Guards the check above: a recognizer that heard nothing must not pass it.
    silence = np.zeros(16000 * 2, dtype="<i2").tobytes()
    assert word_error_rate(words(SENTENCES), words(transcribe(silence))) > 0.9
