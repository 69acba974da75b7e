"""Job files: a JobSpec read from TOML (``adloader submit job.toml``)."""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePath

from adloader.errors import InputError
from adloader.rest import JobSpec, parse_jobspec


def read_jobspec_toml(path: str | Path) -> dict:
    """The raw table of a job TOML file (its ``[job]`` table if it has one), unvalidated;
    a relative ``cwd`` is made absolute relative to the file's folder."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    job = data.get("job", data)
    if not isinstance(job, dict):
        raise InputError(f"{path}: 'job' must be a table")
    job = dict(job)
    cwd = job.get("cwd")
    if isinstance(cwd, str) and not PurePath(cwd).is_absolute():
        job["cwd"] = str((Path(path).resolve().parent / cwd).resolve())
    return job


def load_jobspec_file(path: str | Path) -> JobSpec:
    """A validated JobSpec from a TOML file (see :func:`read_jobspec_toml`)."""
    return parse_jobspec(read_jobspec_toml(path), str(path))
