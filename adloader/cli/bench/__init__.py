"""``adloader bench``: each bench's flags and the tables it prints; the benches themselves
live in ``adloader.bench``."""
