"""The daemon's log: standard ``logging`` at ``--log-level``, as text lines or, with
``--log-format json``, one JSON object a line (what journald, Loki or Elasticsearch take as
fields): ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, and ``exception``
when there is one. uvicorn's own loggers are left unconfigured by it and come here too.
"""

from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """A record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure(level: str = "info", fmt: str = "text") -> None:
    """The root logger: ``level`` (LEVELS), lines on stderr in ``fmt`` (FORMATS)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def say(text: str, fmt: str = "text") -> None:
    """A line for the operator (the daemon's address, its stop): printed as it is, or a
    log record of ``adloader.daemon`` in the JSON log."""
    if fmt == "json":
        logging.getLogger("adloader.daemon").info("%s", text)
    else:
        print(text, flush=True)
