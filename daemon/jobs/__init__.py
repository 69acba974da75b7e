"""Launched jobs' processes: starting them (``launcher``), the supervisor each runs under
(``supervise``, run as a file), their pids, CPU and endings as the node sees them
(``node_processes``), each job's CPU group (``job_shares``), and what a previous daemon left,
taken up at start (``recovery``)."""
