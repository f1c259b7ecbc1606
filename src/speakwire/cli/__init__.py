"""The ``speakwire`` command line: thin wrappers over library calls."""
