"""Time ``--local`` turns: from the end of the user's speech to the STT final, the LLM's first token, the first audio.

    python examples/voice_agent/measure.py --out bench/results/voice-agent-local-2core/turns.json

Ten questions, spoken by speakwire's own voice, one after another in one conversation, each after the previous
reply has finished playing, through the same pipeline as ``agent.py --local --question-wav``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
from pathlib import Path

import agent as voice_agent
import httpx
from local_services import LocalStack, local_stack
from pipecat.frames.frames import EndFrame
from timeline import TurnTimes
from wav_transport import trim_silence

QUESTIONS = [
    "What is the capital of France?",
    "What is the weather like today?",
    "What is your name?",
    "What color is the sky?",
    "How many legs does a spider have?",
    "How many days are in a week?",
    "Tell me about the moon.",
    "Do you like music?",
    "Hello there.",
    "What time is it?",
]


def speak(url: str, text: str) -> bytes:
    body = {"input": text, "response_format": "pcm", "sample_rate": 16000, "seed": 1}
    response = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)
    response.raise_for_status()
    return trim_silence(response.content, 16000)


async def measure(stack: LocalStack) -> list[TurnTimes]:
    args = voice_agent.build_parser().parse_args(["--local"])
    questions = [await asyncio.to_thread(speak, stack.speakwire.url, q) for q in QUESTIONS]
    transport = voice_agent.file_transport()
    agent = voice_agent.build_agent(transport, args, stack)
    running = await voice_agent.start(agent)
    turns = []
    try:
        await asyncio.sleep(1.0)
        for text, pcm in zip(QUESTIONS, questions, strict=True):
            times, _ = await voice_agent.ask(agent, transport, pcm)
            turns.append(times)
            print(
                f"{text!r:40} heard {times.heard!r:40} STT final {times.stt_final_s * 1000:5.0f} ms  "
                f"LLM first token {times.llm_first_token_s * 1000:5.0f} ms  "
                f"TTS first audio {times.tts_first_audio_s * 1000:5.0f} ms",
                flush=True,
            )
            await asyncio.sleep(0.5)
    finally:
        await agent.worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, timeout=30)
    return turns


def summary(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"min": round(ms[0]), "median": round(statistics.median(ms)), "max": round(ms[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Write every turn's timings and the summary here (JSON).")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with local_stack() as stack:
        turns = asyncio.run(measure(stack))
    load_after = os.getloadavg()
    result = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in load_after],
        },
        "tts": "speakwire_tts.SpeakwireSageMakerTTSService (pipecat ElevenLabsTTSService over the bidi relay)",
        "turns": [
            {
                "question": q,
                "heard": t.heard,
                "stt_final_ms": round(t.stt_final_s * 1000),
                "llm_first_token_ms": round(t.llm_first_token_s * 1000),
                "tts_first_audio_ms": round(t.tts_first_audio_s * 1000),
            }
            for q, t in zip(QUESTIONS, turns, strict=True)
        ],
        "summary_ms": {
            "stt_final": summary([t.stt_final_s for t in turns]),
            "llm_first_token": summary([t.llm_first_token_s for t in turns]),
            "tts_first_audio": summary([t.tts_first_audio_s for t in turns]),
        },
    }
    print(json.dumps(result["summary_ms"], indent=2))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
