"""speakwire: a real-time streaming text-to-speech server.

Importing the package needs only the base dependencies; engines with heavy
dependencies (Qwen3-TTS) load them when they are used.
"""

__version__ = "0.1.0"
