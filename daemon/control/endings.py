"""How jobs end (the scheduler's part): a master's Finish, a process's exit status, a
cancel, silence. A job is ``finished`` when its process exited 0, ``failed`` with the exit
code or signal otherwise, ``cancelled`` when it ended after a cancel, and ``lost`` only when
nothing is known. The master's Finish frees the job's workers at once; the final state waits
for the exit status from the job's supervisor (the launcher, or ``adloader run``) when it
has one, for ``exit_wait_s`` at most.
"""

from __future__ import annotations

import signal as signals

from adloader.protocol import Finish, Stop

from .live import ACTIVE, TERMINAL, WAITING, Actions, LiveJob, exit_text


class EndingsMixin:
    """The ending half of ``daemon.control.scheduler.Scheduler`` (which provides ``jobs``,
    ``clock``, the windows and ``_open``)."""

    def _finish(self, job: LiveJob, msg: Finish) -> Actions:
        """The master's last word: its workers go back now; the final state comes with the
        exit status (from the supervisor), or from this word for a job without one."""
        job.iteration = max(job.iteration, msg.iterations)
        if msg.stopped_by and job.cancel_at is None:  # its launcher cancelled it (scancel)
            job.cancel_at = self.clock()
        if job.supervisor is None:  # no one else will say: the master's word is final
            if msg.exit_code < 0:  # it saw the signal that ends it (Ctrl-C)
                return self.exited(job.id, None, -msg.exit_code, msg.error)
            return self.exited(job.id, msg.exit_code, None, msg.error)
        job.finish = msg
        if job.ending_since is None:
            job.ending_since = self.clock()
        data = {"exit_code": msg.exit_code, "iterations": msg.iterations}
        if msg.stopped_by:
            data["stopped_by"] = msg.stopped_by
        return self._release(job, "finishing", data)

    def _release(self, job: LiveJob, kind: str, data: dict) -> Actions:
        was = job.workers
        job.workers = 0
        out = Actions(changed=[job], events=[(job.id, kind, data)])
        if was and job.state == "running":
            self._open(self.completion_window_s)
            out.extend(self.rebase())
        return out

    def exited(self, job_id: str, exit_code: int | None, signal: int | None = None,
               tail: str | None = None, note: str | None = None) -> Actions:
        """The job's process ended: its final state, from what is known of the exit (and a
        ``note`` on how the daemon learned it, kept with the final event)."""
        job = self.jobs.get(job_id)
        if job is None or job.state in TERMINAL:
            return Actions()
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
        return self._end(job, state, code, data)

    def finished(self, job_id: str, state: str, exit_code: int | None = None,
                 iterations: int | None = None, data: dict | None = None) -> Actions:
        """A job ended by the daemon's own decision (cancelled while waiting, lost, a launch
        that failed): its workers go back to the pool."""
        job = self.jobs.get(job_id)
        if job is None or job.state in TERMINAL or (job.state == "lost" and state == "lost"):
            return Actions()
        if iterations is not None:
            job.iteration = iterations
        return self._end(job, state, exit_code, data or {})

    def _end(self, job: LiveJob, state: str, exit_code: int | None, data: dict) -> Actions:
        was_running = job.state in ACTIVE
        job.state, job.workers, job.gpu_ids = state, 0, ()
        job.exit_code, job.reason = exit_code, data.get("exit")
        out = Actions(changed=[job], events=[(job.id, state, {
            "exit_code": exit_code, "iterations": job.iteration,
            "busy_s": round(job.busy_s, 3), "wait_s": round(job.wait_s, 3), **data})])
        if state != "finished":
            self.policy.forget(job.id)  # e.g. ftf's shadow: balance would not have run it on
        if was_running:
            # a finish waits in the completion buffer; a lost or failed job frees its
            # workers at once (DESIGN.md: reclaimed and redistributed)
            self._open(self.completion_window_s if state == "finished" else 0.0)
            out.extend(self.rebase())
        return out

    def cancel(self, job_id: str, signal: int | None = None) -> Actions:
        """Cancel: a waiting job never starts; a running one is asked to stop at its next
        batch boundary, and a launched one is signalled if it has not after the grace.
        With ``signal`` (an operator's choice, launched jobs only) the job's process group
        gets that signal now instead of the request, and SIGKILL if it has not ended after
        twice the grace."""
        job = self.jobs.get(job_id)
        if job is None or job.state in TERMINAL:
            return Actions()
        if job.state in WAITING or job.state == "lost":
            out = Actions()
            if job.state == "lost" and job.supervisor == "launcher":
                out.kill.append((job.id, signal or signals.SIGKILL))  # whatever is left of it
            job.cancel_at = self.clock()
            out.extend(self._end(job, "cancelled", None, {
                "exit": "never started" if job.state in WAITING else "cancelled while lost"}))
            return out
        if signal is not None and job.supervisor == "launcher":
            if job.cancel_at is None:
                job.cancel_at = self.clock()
            job.signalled = signal
            return Actions(kill=[(job.id, signal)], events=[(job.id, "cancel", {
                "signal": signals.Signals(signal).name, "grace_s": self.cancel_grace_s})])
        if job.cancel_at is not None:
            return Actions()
        job.cancel_at = self.clock()
        job.seq += 1
        out = Actions(events=[(job.id, "cancel", {"seq": job.seq,
                                                  "grace_s": self.cancel_grace_s})])
        if job.registered:
            out.send.append((job.id, Stop(seq=job.seq, grace_s=self.cancel_grace_s)))
        elif job.supervisor == "launcher":
            out.kill.append((job.id, signals.SIGTERM))  # no master yet to ask
            job.signalled = signals.SIGTERM
        return out

    def _escalate(self, job: LiveJob, now: float) -> Actions:
        """A cancelled job that has not stopped: a launched one gets SIGTERM after the
        grace, then SIGKILL; one started by hand ends itself (its master does), and is
        cancelled once it is no longer heard."""
        late = now - job.cancel_at
        if job.supervisor == "launcher":
            if late > self.cancel_grace_s and job.signalled == 0:
                job.signalled = signals.SIGTERM
                return Actions(kill=[(job.id, signals.SIGTERM)])
            if late > 2 * self.cancel_grace_s and job.signalled not in (0, signals.SIGKILL):
                job.signalled = signals.SIGKILL
                return Actions(kill=[(job.id, signals.SIGKILL)])
            return Actions()
        if now - job.last_seen > self.lost_timeout_s and late > self.lost_timeout_s:
            return self._end(job, "cancelled", None, {"exit": "no longer heard after cancel"})
        return Actions()

    # -- decisions ---------------------------------------------------------------------
