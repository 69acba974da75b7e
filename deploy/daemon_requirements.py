"""What the daemon needs, torch left out: the requirements of ``adloader[daemon]`` read from
the installed distribution's metadata, one a line, for ``pip install -r``.

The base install is the job side and requires torch; the daemon never imports it (it plans
for the jobs, which bring their own torch). ``deploy/Containerfile`` installs the wheel with
``--no-deps`` and then these, so the daemon's image carries no torch. Standard library only.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys

LEFT_OUT = {"torch"}  # the job side's framework: the daemon's image does without it


def daemon_requirements(dist: str = "adloader", extra: str = "daemon") -> list[str]:
    out = []
    for req in importlib.metadata.requires(dist) or []:
        spec, _, marker = req.partition(";")
        name = re.split(r"[<>=!~\[ ]", spec.strip(), maxsplit=1)[0].lower()
        if name in LEFT_OUT:
            continue
        marker = marker.strip()
        if not marker or re.fullmatch(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", marker):
            out.append(spec.strip())
        elif "extra" not in marker:  # a platform or version marker: pip decides
            out.append(req.strip())
    return out


if __name__ == "__main__":
    print("\n".join(daemon_requirements(*sys.argv[1:2])))
