"""What a ``bench live`` policy label says: ``POLICY`` under a daemon as it runs by default, or
``POLICY+shares`` / ``POLICY+turn`` / ``POLICY+order``: each job in a cgroup of its own, its CPU
weighted by the rule the suffix names (``adloader.host.cpu_share``: ``workers``, ``turn``,
``order``). Read by the command line (to check a label) and by the bench (to start the daemon
it names)."""

from __future__ import annotations

# suffix -> the daemon's CPU share rule
SHARE_RULES = {"shares": "workers", "turn": "turn", "order": "order"}


def split(label: str) -> tuple[str, str | None]:
    """(the policy, the CPU share rule or None) of a label: ``ftf+turn`` -> (ftf, turn)."""
    policy, plus, suffix = label.rpartition("+")
    if plus and suffix in SHARE_RULES:
        return policy, SHARE_RULES[suffix]
    return label, None
