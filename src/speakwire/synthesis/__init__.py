"""Moved from synthesis.py; split into one module per idea in the next commit."""

from speakwire.synthesis.utterance import *  # noqa: F403
