"""What a job does without a node daemon: tuners of its own ``num_workers`` from the batches
it sees (a window of them, a naive autotuner, a competent hill-climber)."""
