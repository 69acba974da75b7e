"""The application master embedded in a job (imports nothing: ``attach`` loads the master,
its messages and ZeroMQ only when a job attaches).

``attach`` (the two-line change), ``master`` (``JobMaster``), ``channel`` and
``master_channel`` (the control channel), ``master_pause`` and ``checkpoint`` (Pause and
Resume), ``run`` (``adloader run``), ``launcher_name`` (a job's name), ``node_ranks`` (a
multi-node job's ranks) and ``exit_watchdog`` (a job that ended with an error ends).
"""
