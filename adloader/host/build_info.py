"""What a bug report needs beside the version: the commit, when it is known (an install from a
git checkout; read from ``.git`` without running git), and the Python — ``--version`` and the
daemon's ``adloader_build_info``. Reads files: an OS fact, so here and not in the core."""

from __future__ import annotations

import functools
from pathlib import Path

from adloader.version import __version__


@functools.cache
def build_info() -> dict[str, str]:
    """{version, commit ("" when unknown), python}: ``adloader_build_info``'s labels."""
    import platform

    return {"version": __version__, "commit": _commit(Path(__file__).resolve().parents[2]),
            "python": platform.python_version()}


def _commit(root: Path) -> str:
    """The checked-out commit of the git work tree at ``root`` (short), or ""."""
    git = root / ".git"
    try:
        if git.is_file():  # a worktree or submodule: "gitdir: PATH"
            git = (root / git.read_text().split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if head.startswith("ref:"):
            ref = head.split(":", 1)[1].strip()
            loose = git / ref
            common = git / "commondir"
            base = (git / common.read_text().strip()).resolve() if common.exists() else git
            if not loose.exists():
                loose = base / ref
            if loose.exists():
                head = loose.read_text().strip()
            else:
                packed = (base / "packed-refs").read_text().splitlines()
                head = next((line.split()[0] for line in packed
                             if line.endswith(" " + ref)), "")
    except (OSError, IndexError):
        return ""
    return head[:12] if len(head) >= 40 and all(c in "0123456789abcdef" for c in head) else ""
