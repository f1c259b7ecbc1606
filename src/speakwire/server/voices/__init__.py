"""The voice library's HTTP routes (``router``) and the server's async view of the store (``library``)."""
