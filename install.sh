#!/usr/bin/env bash
# Installs adloader and what it needs on a bare machine.
# Torch first, pinned to the local CPU build, so that the range in pyproject.toml
# never pulls a CUDA build with several GB of packages.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    echo "install.sh: no C compiler: adloader builds two Cython modules (the loops of ftf and" \
         "jct) on install; install one first (Debian: apt-get install gcc)" >&2
    exit 1
fi
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[dev]"
# pyenv keeps console scripts behind shims: make `adloader` visible at once
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
