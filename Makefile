PYTHON ?= python3
TORCH_SUITE_ARGS ?= --loader both

.PHONY: torch-suite

# PyTorch's test/test_dataloader.py against torch's DataLoader and ElasticDataLoader
# (tests/torch_suite/README.md). The upstream file is fetched by hand and never committed.
torch-suite:
	@if [ ! -f tests/torch_suite/upstream/test_dataloader.py ]; then \
		echo "torch-suite: skipped: tests/torch_suite/upstream/test_dataloader.py is missing"; \
		echo "  fetch it as tests/torch_suite/README.md says (PyTorch's code: never committed)"; \
	else \
		$(PYTHON) tests/torch_suite/run_suite.py $(TORCH_SUITE_ARGS); \
	fi
