"""The core: the v1 wire format, the trace model, the decoder, capture files and errors (numpy only)."""
