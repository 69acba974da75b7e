"""Point the upstream suite's ``DataLoader`` name at adloader's ElasticDataLoader.

PyTorch's ``test/test_dataloader.py`` does ``from torch.utils.data import DataLoader`` and builds
nearly every loader through that module-level name, which is exactly what a user swaps
(``from adloader import ElasticDataLoader as DataLoader``). With ADLOADER_TORCH_SUITE_LOADER set
to ``elastic``, ``swap`` rebinds that one name after the module runs; nothing else is patched, so
the places where the suite writes ``torch.utils.data.DataLoader(...)`` in full still build torch's
loader (README.md lists them).

The module is imported twice over: by pytest in the test process, and again in every process
that multiprocessing spawns to run one of its module-level helpers (``_test_timeout``,
``_test_get_worker_info``, ...). ``install`` puts a finder first on ``sys.meta_path`` so the swap
happens wherever the module is imported; ``sitecustomize.py`` beside this file calls it at
interpreter start, and the harness puts this folder on PYTHONPATH for the pytest process and,
through the environment, for every process it starts.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

ENV_LOADER = "ADLOADER_TORCH_SUITE_LOADER"
MODULE = "test_dataloader"


def wanted() -> bool:
    return os.environ.get(ENV_LOADER, "torch") == "elastic"


def swap(module) -> None:
    """Rebind ``module.DataLoader`` to ElasticDataLoader (once; a no-op unless wanted)."""
    if not wanted() or getattr(module, "_adloader_swapped", False):
        return
    from adloader import ElasticDataLoader

    module.DataLoader = ElasticDataLoader
    module._adloader_swapped = True


class _SwapFinder(importlib.abc.MetaPathFinder):
    """Finds ``test_dataloader`` through the other finders and swaps its name once it has run."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            swap(module)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    if wanted() and not any(isinstance(f, _SwapFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SwapFinder())
