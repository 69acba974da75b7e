"""What a ``bench live`` policy label says: ``POLICY`` under a daemon as it runs by default;
``POLICY+shares`` / ``POLICY+turn`` / ``POLICY+order``: each job in a cgroup of its own, its CPU
weighted by the rule the suffix names (``adloader.host.cpu_share``: ``workers``, ``turn``,
``order``); ``POLICY+open``: the daemon with ``--open-loop``, each plan applied as planned and
never measured (an ablation: ``requested+open`` runs the jobs at their asked-for counts under a
daemon that moves nothing). Read by the command line (to check a label) and by the bench (to
start the daemon it names)."""

from __future__ import annotations

# suffix -> the daemon's CPU share rule
SHARE_RULES = {"shares": "workers", "turn": "turn", "order": "order"}


OPEN = "open"  # suffix: the daemon's loop open


def split(label: str) -> tuple[str, str | None, bool]:
    """(the policy, the CPU share rule or None, whether the loop is open) of a label:
    ``ftf+turn`` -> (ftf, turn, False), ``requested+open`` -> (requested, None, True)."""
    policy, plus, suffix = label.rpartition("+")
    if plus and suffix in SHARE_RULES:
        return policy, SHARE_RULES[suffix], False
    if plus and suffix == OPEN:
        return policy, None, True
    return label, None, False
