"""The REST routes of jobs (``rest.JOBS`` and ``rest.JOB``'s): submit, list, show, cancel,
pause, resume and the log, followed or not."""

# No ``from __future__ import annotations``: FastAPI must see the route functions' types.
import asyncio
from typing import Annotated

import anyio
from fastapi import APIRouter, Query, Response
from fastapi.responses import PlainTextResponse, StreamingResponse

from adloader import rest
from adloader.rest import JobSpec, JobView

from .routes import JobId, call, found, page, paged, problems
from .service import NodeService

DEFAULT_TAIL = 64 * 1024
MAX_TAIL = 16 * 1024 * 1024
FOLLOW_POLL_S = 0.25  # how often a followed log is looked at for more
ENDED_STATES = ("finished", "failed", "cancelled", "lost")
SUBMITS_AT_ONCE = 4  # submits in flight (each may count a model's FLOPs in a child)


async def _follow(service: NodeService, job_id: str, path: str, tail: int):
    """A log's last ``tail`` bytes, then whatever is appended, until the job has ended and
    everything written is sent (or the client goes away: the generator is cancelled)."""
    offset = None
    while True:
        ended = (service.job(job_id) or _Gone).state in ENDED_STATES
        path = path or service.log_path(job_id) or ""  # none until the job is launched
        try:
            with open(path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                if offset is None or offset > size:  # first read, or the file was replaced
                    offset = max(0, size - tail)
                fh.seek(offset)
                chunk = fh.read(1 << 20)
        except OSError:
            chunk = b""
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if ended:
            return
        await asyncio.sleep(FOLLOW_POLL_S)


class _Gone:
    state = "lost"


def router(service: NodeService) -> APIRouter:
    """The job routes over ``service`` (its caller adds the token check)."""
    jobs_api = APIRouter()
    submits = anyio.CapacityLimiter(SUBMITS_AT_ONCE)

    @jobs_api.post(rest.JOBS, status_code=201, response_model=JobView, tags=["jobs"],
                   operation_id="submit_job", responses=problems(400, 409))
    async def submit(spec: JobSpec) -> JobView:
        """Submit a job: it waits in the arrival buffer, then runs with its allocation."""
        return await anyio.to_thread.run_sync(call, "submit", service.submit, spec,
                                              limiter=submits)

    @jobs_api.get(rest.JOBS, response_model=list[JobView], tags=["jobs"],
                  operation_id="list_jobs", responses=paged("jobs"))
    def jobs(query: Annotated[rest.JobQuery, Query()]) -> Response:
        """The jobs the daemon keeps (those it manages, and the history its retention
        keeps), in submit order, a page at a time: ``limit`` of them (default 500) after
        ``cursor`` (``j.`` and a job id: one past the last job is the end of the list), the
        next page's cursor in the ``X-Next-Cursor`` header (absent on the last page); only
        those in ``state`` (repeatable, or comma-separated), named ``name``, submitted in
        [``since``, ``until``) (seconds since the epoch)."""
        body, cursor = call("listing jobs", service.jobs_page, query)
        return page(body, cursor)

    @jobs_api.get(rest.JOB, response_model=JobView, tags=["jobs"], operation_id="get_job",
                  responses=problems(404))
    def job(job_id: JobId) -> JobView:
        return found(job_id, call("reading the job", service.job, job_id))

    @jobs_api.post(rest.JOB_CANCEL, response_model=JobView, tags=["jobs"],
                   operation_id="cancel_job", responses=problems(404, 409))
    def cancel(job_id: JobId,
               signal: Annotated[rest.SignalName | None, Query()] = None) -> JobView:
        """Cancel a job: a queued one never starts, a running one is asked to stop at its
        next batch boundary (then terminated). With ``signal`` (``KILL``, ``SIGKILL`` or
        ``9``: a signal that ends a process) a launched one's processes get that signal now
        instead. An action, not a deletion: the job stays readable (``state`` ``cancelled``
        once it has ended) as long as the retention keeps history; cancelling an ended job
        answers it as it is."""
        args = (job_id,) if signal is None else (job_id, signal)
        return found(job_id, call("cancel", service.cancel, *args))

    @jobs_api.post(rest.JOB_PAUSE, response_model=JobView, tags=["jobs"],
                   operation_id="pause_job", responses=problems(404, 409))
    def pause(job_id: JobId, checkpoint: bool = False) -> JobView:
        """Suspend a running job at its next batch boundary (§III-C): its workers go to the
        others; with ``checkpoint`` it saves model, optimizer and loader state first."""
        return found(job_id, call("pause", service.pause, job_id, checkpoint))

    @jobs_api.post(rest.JOB_RESUME, response_model=JobView, tags=["jobs"],
                   operation_id="resume_job", responses=problems(404, 409))
    def resume(job_id: JobId) -> JobView:
        """Resume a paused job; the next decision gives it its share of the workers."""
        return found(job_id, call("resume", service.resume, job_id))

    @jobs_api.get(rest.JOB_LOG, response_class=PlainTextResponse, tags=["jobs"],
                  operation_id="get_job_log", responses=problems(404))
    def job_log(job_id: JobId, tail: Annotated[int, Query(ge=0, le=MAX_TAIL)] = DEFAULT_TAIL,
                follow: bool = False) -> Response:
        """The last ``tail`` bytes of the job's standard output and error; with ``follow``,
        then what it writes, as it writes it, until it has ended."""
        if not follow:
            return PlainTextResponse(found(job_id, call("reading the log", service.log, job_id,
                                                        tail)))
        path = found(job_id, call("reading the log", service.log_path, job_id))
        return StreamingResponse(_follow(service, job_id, path, tail),
                                 media_type="text/plain; charset=utf-8")

    return jobs_api
