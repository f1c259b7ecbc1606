"""The ``voxserve`` command line: thin wrappers over library calls."""
