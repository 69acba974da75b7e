"""The core run against a clock: the node simulator, the trace format and generator, the
bundled traces, and the paper's experiments — on the same planner and policies the daemon
runs, so the simulator cannot drift from it. The device profiles it runs on as its truth are
``adloader.device``'s."""
