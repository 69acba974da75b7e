"""The core run against a clock: the node simulator, its truths, the trace format and
generator, the bundled traces, and the no-daemon baselines simulated — on the same planner and
policies the daemon runs, so the simulator cannot drift from it. The device profiles it runs
on as its truth are ``adloader.device``'s; the benches that run it are ``adloader.bench.sim``."""
