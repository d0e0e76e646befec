"""Analyses on the trace model: statistics, regions (bubbles, overlap, waves), comparisons, sessions,
clock alignment."""
