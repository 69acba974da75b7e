"""The node daemon: REST API, scheduler, ZeroMQ broker, SQLite store, launcher, monitor."""
