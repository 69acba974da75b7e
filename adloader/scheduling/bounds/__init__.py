"""How far any policy could go: the best schedules as linear and mixed-integer programs, and
the exhaustive search on small mixes the tests use as a reference."""
