"""Stage 3, the one shared reader: prompt template, answer vocabulary, decoding; its calibration."""
