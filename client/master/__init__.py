"""The application master embedded in a job (imports nothing: ``attach`` loads the master,
its messages and ZeroMQ only when a job attaches).

``attach`` (the two-line change), ``master`` (``JobMaster``), ``master_state`` (what the
master shares with the two below), ``channel`` and ``channel_handler`` (the control channel),
``pause`` and ``checkpoint`` (Pause and Resume), ``run`` (``adloader run``),
``launcher_name`` (a job's name), ``node_ranks`` (a multi-node job's ranks) and
``exit_watchdog`` (a job that ended with an error ends).
"""
