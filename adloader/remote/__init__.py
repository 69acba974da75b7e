"""The daemon from outside: its typed REST client (``rest_client``), a real daemon started on
a free port (``process``: demo, benches, tests) and job files in TOML (``jobfile``). What the
command line, the benches and the tests share; the daemon imports none of it. Not pure:
sockets, processes and files."""
