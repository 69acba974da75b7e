"""How jobs end (the scheduler's part): a master's Finish, a process's exit status, a
cancel, silence. A job is ``finished`` when its process exited 0, ``failed`` with the exit
code or signal otherwise, ``cancelled`` when it ended after a cancel, and ``lost`` only when
nothing is known. The master's Finish frees the job's workers at once; the final state waits
for the exit status from the job's supervisor (the launcher, or ``adloader run``) when it
has one, for the scheduler's ``exit_wait_s`` at most.

Each step is a function of the live job: it changes the job and returns an ``Ending`` — what
the node is to do, and what the scheduler is to do about the job set (a decision for the
workers that came back; the policy forgetting a job that left). The clock and the grace
periods come in as values.
"""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass, field

from adloader.protocol import Finish, Stop

from .live import ACTIVE, TERMINAL, WAITING, Actions, LiveJob, exit_text


@dataclass
class Ending:
    """What one ending step asks. ``actions``: of the node. ``freed``: a running job's workers
    came back; the scheduler decides again (at once when the job ``left``, else after its
    completion window) and the others share the node meanwhile. ``left``: the job ended short
    of finishing (cancelled, failed, lost): the policy forgets it."""

    actions: Actions = field(default_factory=Actions)
    freed: bool = False
    left: bool = False


def finish(job: LiveJob, msg: Finish, now: float) -> Ending:
    """The master's last word: its workers go back now; the final state comes with the
    exit status (from the supervisor), or from this word for a job without one."""
    job.iteration = max(job.iteration, msg.iterations)
    if msg.stopped_by and job.cancel_at is None:  # its launcher cancelled it (scancel)
        job.cancel_at = now
    if job.supervisor is None:  # no one else will say: the master's word is final
        if msg.exit_code < 0:  # it saw the signal that ends it (Ctrl-C)
            return exited(job, None, -msg.exit_code, msg.error)
        return exited(job, msg.exit_code, None, msg.error)
    job.finish = msg
    if job.ending_since is None:
        job.ending_since = now
    data = {"exit_code": msg.exit_code, "iterations": msg.iterations}
    if msg.stopped_by:
        data["stopped_by"] = msg.stopped_by
    was = job.workers
    job.workers = 0
    return Ending(Actions(changed=[job], events=[(job.id, "finishing", data)]),
                  freed=bool(was) and job.state == "running")


def exited(job: LiveJob, exit_code: int | None, signal: int | None = None,
           tail: str | None = None, note: str | None = None) -> Ending:
    """The job's process ended: its final state, from what is known of the exit (and a
    ``note`` on how the daemon learned it, kept with the final event). A job already in a
    terminal state is left as it is."""
    if job.state in TERMINAL:
        return Ending()
    if exit_code is None and signal is None and job.finish is not None:
        exit_code, tail = job.finish.exit_code, tail or job.finish.error
        if exit_code < 0:
            exit_code, signal = None, -exit_code
    if job.cancel_at is not None and job.state not in WAITING:
        state = "cancelled"
    elif exit_code == 0 and not signal:
        state = "finished"
    elif exit_code is None and not signal:
        state = "lost"  # nothing is known
    else:
        state = "failed"
    code = -signal if signal else exit_code
    data = {"exit": exit_text(exit_code, signal)}
    if tail:
        data["tail"] = tail[-4096:]
    if note:
        data["note"] = note
    return end(job, state, code, data)


def finished(job: LiveJob, state: str, exit_code: int | None = None,
             iterations: int | None = None, data: dict | None = None) -> Ending:
    """A job ended by the daemon's own decision (cancelled while waiting, lost, a launch
    that failed): its workers go back to the pool. A terminal job, or a lost one declared
    lost again, is left as it is."""
    if job.state in TERMINAL or (job.state == "lost" and state == "lost"):
        return Ending()
    if iterations is not None:
        job.iteration = iterations
    return end(job, state, exit_code, data or {})


def end(job: LiveJob, state: str, exit_code: int | None, data: dict) -> Ending:
    """``job`` ends in ``state`` now, whatever it was: it holds no workers or GPUs, and the
    final event carries ``data``. A finish leaves its workers to the completion buffer; a
    job that left (lost, failed, cancelled) frees them at once (DESIGN.md: reclaimed and
    redistributed)."""
    was_running = job.state in ACTIVE
    job.state, job.workers, job.gpu_ids = state, 0, ()
    job.exit_code, job.reason = exit_code, data.get("exit")
    out = Actions(changed=[job], events=[(job.id, state, {
        "exit_code": exit_code, "iterations": job.iteration,
        "busy_s": round(job.busy_s, 3), "wait_s": round(job.wait_s, 3), **data})])
    return Ending(out, freed=was_running, left=state != "finished")


def cancel(job: LiveJob, now: float, grace_s: float, signal: int | None = None) -> Ending:
    """Cancel: a waiting job never starts; a running one is asked to stop at its next
    batch boundary, and a launched one is signalled if it has not after ``grace_s``.
    With ``signal`` (an operator's choice, launched jobs only) the job's process group
    gets that signal now instead of the request, and SIGKILL if it has not ended after
    twice the grace. A terminal job is left as it is."""
    if job.state in TERMINAL:
        return Ending()
    if job.state in WAITING or job.state == "lost":
        kill = []
        if job.state == "lost" and job.supervisor == "launcher":
            kill.append((job.id, signal or signals.SIGKILL))  # whatever is left of it
        job.cancel_at = now
        ending = end(job, "cancelled", None, {
            "exit": "never started" if job.state in WAITING else "cancelled while lost"})
        ending.actions.kill[:0] = kill
        return ending
    if signal is not None and job.supervisor == "launcher":
        if job.cancel_at is None:
            job.cancel_at = now
        job.signalled = signal
        return Ending(Actions(kill=[(job.id, signal)], events=[(job.id, "cancel", {
            "signal": signals.Signals(signal).name, "grace_s": grace_s})]))
    if job.cancel_at is not None:
        return Ending()
    job.cancel_at = now
    job.seq += 1
    out = Actions(events=[(job.id, "cancel", {"seq": job.seq, "grace_s": grace_s})])
    if job.registered:
        out.send.append((job.id, Stop(seq=job.seq, grace_s=grace_s)))
    elif job.supervisor == "launcher":
        out.kill.append((job.id, signals.SIGTERM))  # no master yet to ask
        job.signalled = signals.SIGTERM
    return Ending(out)


def escalate(job: LiveJob, now: float, grace_s: float, lost_timeout_s: float) -> Ending:
    """A cancelled job that has not stopped: a launched one gets SIGTERM after ``grace_s``,
    then SIGKILL after twice that; one started by hand ends itself (its master does), and
    is cancelled once it has not been heard for ``lost_timeout_s``."""
    late = now - job.cancel_at
    if job.supervisor == "launcher":
        if late > grace_s and job.signalled == 0:
            job.signalled = signals.SIGTERM
            return Ending(Actions(kill=[(job.id, signals.SIGTERM)]))
        if late > 2 * grace_s and job.signalled not in (0, signals.SIGKILL):
            job.signalled = signals.SIGKILL
            return Ending(Actions(kill=[(job.id, signals.SIGKILL)]))
        return Ending()
    if now - job.last_seen > lost_timeout_s and late > lost_timeout_s:
        return end(job, "cancelled", None, {"exit": "no longer heard after cancel"})
    return Ending()
