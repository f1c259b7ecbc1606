"""Audio data types and signal processing: chunks, resampling, decoding reference audio."""
