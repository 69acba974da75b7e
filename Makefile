PYTHON ?= python3
TORCH_SUITE_ARGS ?= --loader both
TORCH_FLOOR ?= 2.1.0
TORCH_FLOOR_VENV ?= /tmp/adloader-torch-$(TORCH_FLOOR)
# the tests marked none of what a test needs, nor slow (pyproject.toml registers them)
FAST_TIER = not (processes or root or slurm or qemu or chromium or fuzz or bench or slow)

.PHONY: test-fast torch-suite test-torch-floor

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

# The job side on the oldest torch pyproject.toml accepts, in a venv of its own (PyPI's build
# of it: ~2.5 GB the first time): the client and daemon integration tiers but the framework,
# torch-suite and API-contract tests (docs/loader.md, "torch versions"). Run from tests/ with
# the venv's pytest script, so the installed package is imported, not this tree's folders.
test-torch-floor:
	test -x $(TORCH_FLOOR_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_FLOOR_VENV)
	$(TORCH_FLOOR_VENV)/bin/pip install -q "torch==$(TORCH_FLOOR)" "numpy<2" pytest \
		pytest-timeout hypothesis ".[daemon]"
	$(TORCH_FLOOR_VENV)/bin/pip install -q --force-reinstall --no-deps .
	cd tests && $(TORCH_FLOOR_VENV)/bin/pytest -q -p no:cacheprovider integration/client \
		integration/daemon --ignore=integration/client/test_frameworks.py \
		--ignore=integration/client/test_torch_suite.py \
		--ignore=integration/daemon/test_api_contract.py
