"""Allocation policies: the ``Policy`` protocol, the registry by name (``registry``), and each
policy (the paper's allocation, ``fair``, ``ftf``, ``jct``) with what they plan from."""
