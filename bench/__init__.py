"""Gannet benchmarks (``make bench``); results go to ``bench/results/``."""
