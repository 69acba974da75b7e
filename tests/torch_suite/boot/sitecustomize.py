"""Started by the torch-suite harness only (this folder is on PYTHONPATH just for its runs)."""

import torch_suite_swap

torch_suite_swap.install()
