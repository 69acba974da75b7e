"""Scheduling: everything that decides how many loading workers each job gets.

``model``: the TPM (F_μ and the staged F_λ, fitted from samples), a job's online correction
and intake ceiling. ``policies``: one ``Policy`` protocol and registry over the paper's
allocation, ``fair``, ``ftf`` and ``jct``. ``kernels``: their compiled loops. ``planner``:
one decision; ``closed_loop``: a plan kept only where the node measures it better;
``node_summary``: what a node offers a cluster scheduler. ``bounds``: how far any policy
could go. ``tuners``: what a job does alone. Pure: no sockets, processes or disk.
"""
