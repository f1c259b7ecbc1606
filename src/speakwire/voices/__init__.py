"""The voice library: cloned voices saved once (reference audio, consent, clone prompts) and used by name.

``store.VoiceStore`` keeps them on disk (SQLite + one directory per voice, crash-safe);
``archive`` moves one voice between machines as a single ``.swv`` file; ``client``
reaches a library in a local data dir or on a running server alike. Nothing here
knows HTTP: ``speakwire.server.voices`` serves the library, ``speakwire.cli.voices``
manages it from a shell.
"""
