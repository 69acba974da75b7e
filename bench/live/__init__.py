"""Benches that run real jobs under the daemon and without it: the live mixes, their rounds
and report, the no-daemon rows, the tuner's bar, start-up and resize costs."""
