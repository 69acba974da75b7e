"""The node daemon: REST API, scheduler, ZeroMQ broker, SQLite store, launcher, monitor.

``node`` wires the parts into one ``Node`` and runs its control loop; each part is a
sub-package of one concept:

- ``control``: the scheduler and what it decides (live jobs, registration, endings, the
  ZeroMQ broker, job tokens, the Slurm name check);
- ``store``: the SQLite store, its history pages, retention, readers, faults, backups,
  identity and the TPM's samples;
- ``api``: the REST API (the FastAPI app, its routes, the ``NodeService`` it speaks to, the
  operator's page), ``/metrics`` and its listener, the HTTP server;
- ``jobs``: launched jobs' processes: the launcher, their supervisor, pids and endings, CPU
  shares, and what a previous daemon left;
- ``model``: the TPM learnt online, refitted and its features counted in child processes;
- ``cache``: the node cache, the daemon's side;
- ``ops``: running the daemon: settings, logs, systemd, the state directory's lock.
"""
