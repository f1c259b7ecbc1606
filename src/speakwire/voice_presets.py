"""Voice names other ecosystems' stock clients send by default, which mean this server's default voice.

A voice-agent developer points a vendor's stock plugin (LiveKit's, pipecat's, the vendor's own SDK quick-start)
at speakwire by its base URL and changes nothing else; the plugin still sends its vendor's default voice id.
Each table below holds the ids one vendor's ecosystem sends that way, with where each came from, so that
request speaks with the default voice instead of failing with "voice not found".

The server (``ServerState.voice_aliases``) lists every table name as an alias of the default voice in
``GET /v1/audio/voices``, and resolves them on every route, as it does OpenAI's names. ``--no-preset-voice-aliases``
turns all of them off; a voice the engine really has (or a saved voice) of the same name always wins, and any
other unknown id is still refused in the vendor's own error shape.

Only ids read from a vendor's or framework's own source or documentation are here; none is guessed.
"""

from __future__ import annotations

import re

OPENAI_VOICE_ALIASES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar",
)  # fmt: skip
"""OpenAI's 13 built-in voices (``/v1/audio/speech``): pipecat's ``OpenAITTSService`` refuses any other name."""

PRESET_SPEAKER_ALIASES = ("Vivian", "Serena", "Uncle_Fu", "Dylan", "Eric", "Ryan", "Aiden", "Ono_Anna", "Sohee")
"""Qwen3-TTS CustomVoice speakers: on an engine without them they mean its default voice, so clients
written for a Qwen3 server (the AWS sample sends ``voice: "Vivian"``) work against a laptop's Piper."""

ELEVENLABS_VOICE_IDS = (
    # livekit-plugins-elevenlabs 1.8.9, tts.py: DEFAULT_VOICE_ID ("Bella"), what elevenlabs.TTS() sends.
    "hpp4J3VqNfWAUOO0d1Us",
    # ElevenLabs' "Current Default Voices" (category "premade" in the API), elevenlabs/elevenlabs-docs
    # fern/docs/pages/product-guides/voices/default-voices.mdx (3557f0b, 2025-08-25). George is the voice of
    # the SDK's README and the docs' quick-starts (examples/snippets/python/quickstart_tts.py); Alice and Roger
    # are the fallbacks of pipecat's examples (examples/function-calling/function-calling-google-vertex.py, ...).
    "Xb7hH8MSUJpSbSDYk0k2",  # Alice
    "9BWtsMINqrJLrRacOk9x",  # Aria
    "pqHfZKP75CvOlQylNhV4",  # Bill
    "nPczCjzI2devNBz1zQrb",  # Brian
    "N2lVS1w4EtoT3dr4eOWO",  # Callum
    "IKne3meq5aSn9XLyUdCD",  # Charlie
    "XB0fDUnXU5powFXDhCwa",  # Charlotte
    "iP95p4xoKVk53GoZ742B",  # Chris
    "onwK4e9ZLuTAKqWW03F9",  # Daniel
    "cjVigY5qzO86Huf0OWal",  # Eric
    "JBFqnCBsd6RMkjVDRZzb",  # George
    "cgSgspJ2msm6clMCkdW9",  # Jessica
    "FGY2WhTYpPnrIDTdsKH5",  # Laura
    "TX3LPaxmHKxFdv7VOQHJ",  # Liam
    "pFZP5JQG7iQjIQuC4Bku",  # Lily
    "XrExE9yKIg1WjnnlVkGX",  # Matilda
    "SAz9YHcvj6GT2YYXdXww",  # River
    "CwhRBWXzGAHq8TQ4Fs17",  # Roger
    "EXAVITQu4vr4xnSDxMaL",  # Sarah
    "bIHbv24MWmeRgasZH58o",  # Will
    # ElevenLabs' "Legacy Voices" (the same page), still served and still in many quick-starts: Rachel is the
    # voice of the elevenlabs SDK's docstrings (elevenlabs 2.78, text_to_speech/client.py), Adam of pipecat's
    # examples/rag/rag-mem0.py.
    "pNInz6obpgDQGcFmaJgB",  # Adam
    "ErXwobaYiN019PkySvjV",  # Antoni
    "VR6AewLTigWG4xSOukaG",  # Arnold
    "2EiwWnXFnvU5JabPnv8n",  # Clyde
    "CYw3kZ02Hs0563khs1Fj",  # Dave
    "ThT5KcBeYPX3keUQqHPh",  # Dorothy
    "29vD33N1CtxCmqQRPOHJ",  # Drew
    "LcfcDJNUP1GQjkzn1xUU",  # Emily
    "g5CIjZEefAph4nQFvHAz",  # Ethan
    "D38z5RcWu1voky8WS1ja",  # Fin
    "jsCqWAovK2LkecY7zXl4",  # Freya
    "Yko7PKHZNXotIFUBG7I9",  # George (legacy)
    "jBpfuIE2acCO8z3wKNLl",  # Gigi
    "zcAOhNBS3c14rBihAFp1",  # Giovanni
    "z9fAnlkpzviPz146aGWa",  # Glinda
    "oWAxZDx7w5VEj9dCyTzz",  # Grace
    "SOYHLrjzK2X1ezoPC6cr",  # Harry
    "ZQe5CZNOzWyzPSCn5a3c",  # James
    "bVMeCyTHy58xNoL34h3p",  # Jeremy
    "t0jbNlBVZ17f02VDIeMI",  # Jessie
    "Zlb1dXrM653N07WRdFW3",  # Joseph
    "TxGEqnHWrfWFTfGW9XjX",  # Josh
    "flq6f7yk4E4fJM5XTYuZ",  # Michael
    "zrHiDhphv9ZnVXBqCLjz",  # Mimi
    "piTKgcLEGmPE4e6mEKli",  # Nicole
    "ODq5zmih8GrVes37Dizd",  # Patrick
    "5Q0t7uMcjvnagumLfvZi",  # Paul
    "21m00Tcm4TlvDq8ikWAM",  # Rachel
    "yoZ06aMxZJJ28mfd3POQ",  # Sam
    "pMsXgVXv3BLzUgSXRplE",  # Serena
    "GBv7mTt0atIp3Br8iCZE",  # Thomas
)
"""ElevenLabs voice ids (the ``{voice_id}`` of ``/v1/text-to-speech/{voice_id}[...]``). pipecat's
``ElevenLabsTTSService`` has no default voice (1.14: ``voice=None``); its examples use ids listed here."""

CARTESIA_VOICE_IDS = (
    # livekit-plugins-cartesia 1.8.9 models.py: TTSDefaultVoiceId (Katie), what cartesia.TTS() sends; also the
    # voice of Cartesia's realtime TTS quick-start (docs.cartesia.ai/get-started/realtime-text-to-speech-quickstart).
    "f786b574-daa5-4673-aa0c-cbe3e8534c02",
    # livekit/agents (da6af86) README.md and examples/voice_agents/basic_agent.py.
    "9626c31c-bec5-4cca-baa8-f8ba9e84c8bc",
    # pipecat (acead05) `pipecat init` default (src/pipecat/cli/registry/service_metadata.py) and the voice of
    # most pipecat examples; pipecat's CartesiaTTSService itself has no default (1.14: voice=None).
    "71a7ad14-091c-4e8e-a314-022ece01c121",
    # cartesia 4.2 SDK: its README's WebSocket example, and the placeholder voice no_more_inputs() sends on a
    # context that named none (cartesia/lib/_tts.py).
    "6ccbfb76-1fc6-48f7-b71d-91ac6298247b",
    # cartesia 4.2 SDK: its README's bytes (HTTP) example.
    "e07c00bc-4134-4eae-9ea4-1a55fb45746b",
    # docs.cartesia.ai/get-started/make-an-api-request, the curl quick-start: its 2025-04-16 and its 2024-06-10
    # editions.
    "694f9389-aac1-45b6-b726-9d9369183238",
    "a0e99841-438c-4a64-b679-ae501e7d6091",
)
"""Cartesia voice ids (``voice: {"mode": "id", "id": ...}`` or a bare id, on ``/tts/*``)."""

DEEPGRAM_AURA_VOICES = (
    # livekit-plugins-deepgram 1.8.9 models.py TTSModels (Aura-2 English); deepgram.TTS() sends aura-2-andromeda-en,
    # as pipecat's voice-deepgram-sagemaker example does.
    "aura-2-andromeda-en", "aura-2-apollo-en", "aura-2-arcas-en", "aura-2-aries-en", "aura-2-artemis-en",
    "aura-2-asteria-en", "aura-2-atlas-en", "aura-2-aurora-en", "aura-2-callisto-en", "aura-2-cetus-en",
    "aura-2-chiron-en", "aura-2-columbia-en", "aura-2-cordelia-en", "aura-2-crina-en", "aura-2-draco-en",
    "aura-2-electra-en", "aura-2-eos-en", "aura-2-harmonia-en", "aura-2-helios-en", "aura-2-hera-en",
    "aura-2-hermes-en", "aura-2-hyperion-en", "aura-2-io-en", "aura-2-iris-en", "aura-2-janus-en",
    "aura-2-juno-en", "aura-2-jupiter-en", "aura-2-luna-en", "aura-2-mars-en", "aura-2-minerva-en",
    "aura-2-mira-en", "aura-2-neptune-en", "aura-2-odysseus-en", "aura-2-ophiuchus-en", "aura-2-orion-en",
    "aura-2-orpheus-en", "aura-2-phoebe-en", "aura-2-pluto-en", "aura-2-saturn-en", "aura-2-selene-en",
    "aura-2-theia-en", "aura-2-titan-en", "aura-2-triton-en", "aura-2-vega-en", "aura-2-venus-en", "aura-2-zeus-en",
    # pipecat 1.14 DeepgramTTSService and DeepgramSageMakerTTSService default (services/deepgram/tts.py,
    # sagemaker/tts.py); not in LiveKit's list.
    "aura-2-helena-en",
    # The same LiveKit list, Aura-1 English (legacy).
    "aura-asteria-en", "aura-luna-en", "aura-stella-en", "aura-athena-en", "aura-hera-en", "aura-orion-en",
    "aura-arcas-en", "aura-perseus-en", "aura-angus-en", "aura-orpheus-en", "aura-helios-en", "aura-zeus-en",
)  # fmt: skip
"""Deepgram Aura voices (``model=`` on ``/v1/speak``), which name a voice and its model at once."""

AURA_VOICE = re.compile(r"^aura(-\d+)?-[a-z]+-[a-z]{2}$", re.IGNORECASE)
"""Any Aura voice name, ``aura[-<generation>]-<name>-<language>``: Deepgram has more voices (other languages,
later additions) than any table lists, and each of them means the default voice too; only the table is listed."""

MAGPIE_VOICES = (
    # pipecat 1.14 NvidiaSageMakerTTSService and NvidiaSageMakerHTTPTTSService default (services/nvidia/sagemaker/
    # tts.py), and NVIDIA's Magpie SageMaker wrapper's (pipecat-examples deployment/aws-sagemaker-nvidia).
    "Magpie-Multilingual.EN-US.Aria",
    # NIM TTS docs, "Voices and Emotional Styles": Magpie TTS Zeroshot's recommended defaults, Flow's example.
    "Magpie-ZeroShot.Female-1", "Magpie-ZeroShot.Male-1", "English-US-Magpie-Flow.Female-1",
    # Riva realtime TTS reference: the synthesis session's default voice_name and its other example.
    "English-US.Male-1", "English-US.Female-1",
)  # fmt: skip
"""NVIDIA Magpie / Riva voice names (``voice_name`` of the NIM realtime session and of the SageMaker body)."""

MAGPIE_VOICE = re.compile(r"^(magpie-[a-z]+\.|[a-z]+-[a-z]{2}(-[a-z0-9-]+)?\.(male|female))", re.IGNORECASE)
"""Any NIM voice name: ``Magpie-<model>.<locale>.<speaker>[.<emotion>]`` and Riva's ``<Language>-<REGION>[-<model>]
.<Male|Female>…``, whatever the speaker or emotion; only the table is listed."""

PRESET_VOICE_NAMES: tuple[str, ...] = (
    *OPENAI_VOICE_ALIASES,
    *PRESET_SPEAKER_ALIASES,
    *ELEVENLABS_VOICE_IDS,
    *CARTESIA_VOICE_IDS,
    *DEEPGRAM_AURA_VOICES,
    *MAGPIE_VOICES,
)
"""Every listed preset name, in table order (the aliases ``GET /v1/audio/voices`` shows)."""

_PRESETS_LOWER = frozenset(name.lower() for name in PRESET_VOICE_NAMES)


def is_preset_voice(name: str) -> bool:
    """Whether ``name`` is a stock client's default voice name (a table entry, any Aura or Magpie voice), any case."""
    return name.lower() in _PRESETS_LOWER or AURA_VOICE.match(name) is not None or MAGPIE_VOICE.match(name) is not None
