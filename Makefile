PYTHON ?= python3
TORCH_SUITE_ARGS ?= --loader both
# the tests marked none of what a test needs, nor slow (pyproject.toml registers them)
FAST_TIER = not (processes or root or slurm or qemu or chromium or fuzz or bench or slow)

.PHONY: test-fast torch-suite

# The fast tier, for every change: pure units (no processes, sockets, root, Slurm, QEMU or
# Chromium), none slow. tests/conftest.py fails a pure test that starts a process or opens a
# socket.
# Only tests/unit holds such tests (every file under tests/integration and tests/bench is in
# its NEEDS); `$(PYTHON) -m pytest -q` runs every tier.
test-fast:
	$(PYTHON) -m pytest -q tests/unit -m "$(FAST_TIER)"

# PyTorch's test/test_dataloader.py against torch's DataLoader and ElasticDataLoader
# (tests/torch_suite/README.md). The upstream file is fetched by hand and never committed.
torch-suite:
	@if [ ! -f tests/torch_suite/upstream/test_dataloader.py ]; then \
		echo "torch-suite: skipped: tests/torch_suite/upstream/test_dataloader.py is missing"; \
		echo "  fetch it as tests/torch_suite/README.md says (PyTorch's code: never committed)"; \
	else \
		$(PYTHON) tests/torch_suite/run_suite.py $(TORCH_SUITE_ARGS); \
	fi
