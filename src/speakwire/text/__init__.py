"""Text processing before synthesis: incremental segmentation and English normalization."""
