"""Workloads: traces, the generator, device profiles, the node simulator and benchmarks."""
