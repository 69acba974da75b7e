"""The throughput prediction model (TPM): the samples it is fitted from, F_μ and the staged
F_λ, a fitted regressor as plain arrays, a job's online correction and its intake ceiling."""
