#!/usr/bin/env bash
# Installs adloader and what it needs on a bare machine.
# Torch first, pinned to the local CPU build, so that the range in pyproject.toml
# never pulls a CUDA build with several GB of packages.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if ! command -v cc >/dev/null 2>&1 && ! command -v gcc >/dev/null 2>&1; then
    echo "install.sh: no C compiler: the loops of ftf and jct stay in Python (same plans," \
         "slower); install one (Debian: apt-get install gcc) and rerun for the compiled ones" >&2
fi
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    "$PY" -m pip install -q "torch==2.13.0"
fi
# the job side, the daemon (its extra) and the tools the tests use
"$PY" -m pip install -q -e ".[daemon,dev]"
# pyenv keeps console scripts behind shims: make `adloader` visible at once
if command -v pyenv >/dev/null 2>&1; then pyenv rehash || true; fi
