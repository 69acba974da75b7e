"""Simulated benches: the paper's experiments, the declared space of mixes, the development
and held-out mixes, and what they print and draw."""
