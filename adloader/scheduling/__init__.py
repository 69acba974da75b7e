"""Scheduling: everything that decides how many loading workers each job gets.

The TPM (``throughput``: F_μ and the staged F_λ, fitted from ``samples``), its online
``correction``, GPU sharing (``gpushare``), the policies behind one ``Policy`` protocol and
registry (``policies``: ``allocation``'s rules, WAA and ``optimal``; ``fair``; ``jct``;
``ftf`` with ``priority_plan`` and ``shadow_balance``), one decision (``planner``), and
the bounds every policy is held to (``fair_frontier``, ``schedule_lp``). Pure: no sockets,
processes or disk.
"""
