"""PyTorch profiler (Chrome JSON) traces: loading, kernel tables, gaps."""
