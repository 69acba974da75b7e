"""Benches of running the daemon: the REST control plane at scale, the install, the soak,
two nodes."""
