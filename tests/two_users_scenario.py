"""The scenario ``tests/test_two_users.py`` runs as root in a private mount namespace
(``unshare --mount --propagation private``): the multi-tenant threat model with real Unix
users. Not a test module (pytest does not collect this file name).

- the daemon runs as DAEMON (primary group GROUP, the socket group), its control socket in
  RUN_DIR (DAEMON:GROUP, 0750, as systemd's RuntimeDirectory makes it);
- TENANT (in GROUP) runs a real ``adloader run -- python train.py`` job;
- HOSTILE (in GROUP) attacks it: the daemon's files, the job's environment, forged messages
  for its job id, the job's own token leaked to it, signals;
- OUTSIDER (not in GROUP) tries to reach the control socket at all.

The interpreter may live where other users cannot reach it (pyenv under /root, 0700); in
this process's own mount namespace the top-most folder that blocks them is covered by a
tmpfs (0755) with the needed entries bind-mounted back: nothing changes outside.

    python two_users_scenario.py scenario BASE    root: the whole scenario
    python two_users_scenario.py hostile ARGS     HOSTILE's own process (ARGS: JSON)
    python two_users_scenario.py outsider ARGS
    python two_users_scenario.py same-user ARGS

Every role prints one JSON object as its last line of stdout. The scenario's says
``{"skip": reason}`` when the machinery cannot be set up here, ``{"error": ...}`` when a
step failed, else what every party observed. Process groups it starts are listed in
``BASE/pgids`` (one a line) so the test can end them should this process die first.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import stat
import subprocess
import sys
import time
import traceback
from pathlib import Path

GROUP, DAEMON, TENANT, HOSTILE, OUTSIDER = 61000, 61001, 61002, 61003, 61004
PRIMARY = {DAEMON: GROUP, TENANT: TENANT, HOSTILE: HOSTILE, OUTSIDER: OUTSIDER}
EXTRA = {DAEMON: [], TENANT: [GROUP], HOSTILE: [GROUP], OUTSIDER: []}
PY = sys.executable
HERE = Path(__file__).resolve().parent


# -- letting other users run this interpreter ------------------------------------------
def needed_paths() -> set[str]:
    """What other users' processes must reach: the interpreter, its libraries, adloader."""
    import sysconfig

    import adloader
    import adloader.bench
    import adloader.client
    import adloader.daemon
    import adloader.models
    import adloader.workloads

    found = [PY, sys.prefix, sys.base_prefix, sys.exec_prefix, str(HERE),
             *sysconfig.get_paths().values(), *(p for p in sys.path if p),
             *(os.path.dirname(m.__file__) for m in (adloader, adloader.client, adloader.daemon,
                                                     adloader.models, adloader.workloads,
                                                     adloader.bench))]
    out = set()
    for path in found:
        if os.path.exists(path):
            out.add(os.path.realpath(path))
            out.add(os.path.realpath(os.path.dirname(os.path.abspath(path))))
    return out


def blocked_at(path: str) -> tuple[str, str] | None:
    """The top-most folder above ``path`` that others may not pass through, and the name
    under it on the way to ``path``; None when others can reach ``path``."""
    parts = Path(path).parts
    for i in range(1, len(parts)):
        folder = os.path.join(*parts[:i])
        if not os.stat(folder).st_mode & stat.S_IXOTH:
            return folder, parts[i]
    return None


def _mountpoint_like(src: str, at: str) -> None:
    if os.path.isdir(src):
        os.makedirs(at, exist_ok=True)
    else:
        Path(at).touch()


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def expose(paths: set[str], stash_root: Path) -> list[str]:
    """In this mount namespace, let other users reach ``paths``: each blocking folder gets a
    tmpfs (0755) with just the entries on the way bind-mounted back. Returns the folders
    covered (none when nothing blocks)."""
    covered: list[str] = []
    for _ in range(8):  # a blocked folder may sit under a blocked folder
        plan: dict[str, set[str]] = {}
        for path in paths:
            hit = blocked_at(path)
            if hit:
                plan.setdefault(hit[0], set()).add(hit[1])
        if not plan:
            return covered
        for folder, names in sorted(plan.items()):
            stashed = []
            for name in sorted(names):
                src, stash = os.path.join(folder, name), str(stash_root / f"{len(covered)}-{name}")
                _mountpoint_like(src, stash)
                _mount("--bind", src, stash)
                stashed.append((src, stash))
            _mount("-t", "tmpfs", "-o", "mode=0755", "adloader-two-users", folder)
            for src, stash in stashed:
                _mountpoint_like(stash, src)
                _mount("--move", stash, src)
            covered.append(folder)
    raise RuntimeError(f"still blocked after covering {covered}")


# -- the roles: small processes run as one user each -----------------------------------
def attempt(fn) -> str:
    """'ok', or the errno's name (EACCES, EPERM, ...)."""
    try:
        fn()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "ok"


def _read(path: str) -> None:
    with open(path, "rb") as fh:
        fh.read(1)


def _answers(sock, want: int, timeout_s: float) -> list:
    """Decoded messages arriving within ``timeout_s`` (sooner once ``want`` came)."""
    from adloader.protocol import decode_to_job

    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < want and (left := deadline - time.monotonic()) > 0:
        if sock.poll(int(left * 1000) + 1):
            out.append(decode_to_job(sock.recv()))
    return out


def hostile(args: dict) -> dict:
    """A member of the socket group who wants to stop, steal from or impersonate a job."""
    import secrets
    import urllib.error
    import urllib.request

    import zmq

    from adloader.protocol import Exit, Finish, Heartbeat, JobFeatures, Paused, Register, encode

    out: dict = {"uid": os.getuid(), "groups": sorted(os.getgroups())}
    state, victim = args["state"], args["job"]
    # (a) the daemon's files
    out["state_listing"] = attempt(lambda: os.listdir(state))
    out["state_files"] = {name: attempt(lambda n=name: _read(os.path.join(state, n)))
                          for name in args["files"]}
    # (b) the job's environment (its token is there)
    out["environ"] = {str(pid): attempt(lambda p=pid: _read(f"/proc/{p}/environ"))
                      for pid in args["pids"]}
    # (d) the job's processes
    out["kill"] = {str(pid): attempt(lambda p=pid: os.kill(p, signal.SIGKILL))
                   for pid in args["pids"]}
    out["killpg"] = {str(pg): attempt(lambda g=pg: os.killpg(g, signal.SIGKILL))
                     for pg in args["pgids"]}
    # the REST API without its token
    try:
        with urllib.request.urlopen(args["rest"] + "/v1/jobs", timeout=10) as answer:
            out["rest_without_token"] = answer.status
    except urllib.error.HTTPError as exc:
        out["rest_without_token"] = exc.code
    # (c) the control socket: it may register a job of its own ...
    context = zmq.Context()
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(args["endpoint"])
    features = JobFeatures(model="smResnet20", batch_size=4, flops_g=0.3, params_m=0.3,
                           iterations=1000)
    own, own_token = f"hostile-{os.getpid()}", secrets.token_urlsafe(24)
    sock.send(encode(Register(job=own, token=own_token, features=features, workers=1)))
    out["own_register"] = [a.type for a in _answers(sock, 1, 20)]
    sock.send(encode(Finish(job=own, token=own_token, iterations=1)))
    # ... but every message for the victim's job, with any token it can guess, is refused
    guesses = [secrets.token_urlsafe(24), "x", victim, own_token, "hmac-sha256:" + "0" * 64]
    forged = []
    for guess in guesses:
        forged += [Finish(job=victim, token=guess, iterations=10**6, exit_code=1),
                   Heartbeat(job=victim, token=guess, iteration=10**6, step_s=1.0,
                             data_wait_s=0.0, samples_per_s=1.0, workers=64),
                   Paused(job=victim, token=guess, seq=1),
                   Exit(job=victim, token=guess, exit_code=1),
                   Register(job=victim, token=guess, features=features, workers=64)]
    for message in forged:
        sock.send(encode(message))
    answers = _answers(sock, len(forged), 20)
    answers += _answers(sock, 1, 0.5)  # anything beyond one answer each
    out["forged_sent"] = len(forged)
    out["forged_answers"] = sorted({a.type for a in answers})
    out["forged_answered"] = len(answers)
    out["refusal_reasons"] = sorted({getattr(a, "reason", "") for a in answers})
    # a connection that takes the victim's routing id hears nothing meant for the victim:
    # only the refusal of its own forged message
    thief = context.socket(zmq.DEALER)
    thief.setsockopt(zmq.ROUTING_ID, victim.encode())
    thief.setsockopt(zmq.LINGER, 0)
    thief.connect(args["endpoint"])
    thief.send(encode(Heartbeat(job=victim, token=guesses[0], iteration=1, step_s=1.0,
                                data_wait_s=0.0, samples_per_s=1.0, workers=1)))
    out["stolen_routing_id_heard"] = sorted(a.type for a in _answers(thief, 2, 1.0))
    thief.close()
    # (e) the job's own token, leaked (a shared file, a log line): the job is bound to the
    # user the kernel said registered it, so another user's process is refused all the same
    leak = context.socket(zmq.DEALER)
    leak.setsockopt(zmq.LINGER, 0)
    leak.connect(args["endpoint"])
    for message in (Heartbeat(job=victim, token=args["leaked_token"], iteration=10**6,
                              step_s=1.0, data_wait_s=0.0, samples_per_s=1.0, workers=64),
                    Register(job=victim, token=args["leaked_token"], features=features,
                             workers=64)):
        leak.send(encode(message))
    answers = _answers(leak, 2, 20) + _answers(leak, 1, 0.5)
    out["leaked_token_answers"] = [a.type for a in answers]
    out["leaked_token_reasons"] = sorted({getattr(a, "reason", "") for a in answers})
    leak.close()
    sock.close()
    context.term()
    return out


def outsider(args: dict) -> dict:
    """Someone not in the socket group: the socket's folder stops them."""
    import socket

    def connect():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(args["socket"])

    return {"uid": os.getuid(), "groups": sorted(os.getgroups()),
            "stat_socket": attempt(lambda: os.stat(args["socket"])),
            "list_run_dir": attempt(lambda: os.listdir(os.path.dirname(args["socket"]))),
            "connect": attempt(connect)}


def same_user(args: dict) -> dict:
    """Another process of the job's own user: it can read the job's environment."""
    with open(f"/proc/{args['pid']}/environ", "rb") as fh:
        names = [kv.split(b"=", 1)[0].decode() for kv in fh.read().split(b"\0") if kv]
    return {"uid": os.getuid(), "reads_environ": "ok",
            "sees_job_token": "ADLOADER_JOB_TOKEN" in names}


ROLES = {"hostile": hostile, "outsider": outsider, "same-user": same_user}


# -- the scenario (root) ---------------------------------------------------------------
TRAIN = """
import os, sys, time
from adloader.client import attach
from adloader.client.loader.loader import ElasticDataLoader
loader = ElasticDataLoader(list(range(100000)), batch_size=4, num_workers=0)
job = attach(loader, model="smResnet20", batch_size=4, iterations=100000)
print("attached", flush=True)
for i, batch in enumerate(loader):
    time.sleep(0.02)  # pacing: a training step
    if os.path.exists({stop!r}):
        break
print("done", i, flush=True)
"""


class Skip(Exception):
    """The machinery (mounts, other users' processes) cannot be set up here."""


class Scenario:
    def __init__(self, base: Path):
        self.base = base
        self.logs = base / "logs"
        self.logs.mkdir(mode=0o700)
        self.procs: list[subprocess.Popen] = []
        self.pgids: list[int] = []

    def home(self, uid: int, mode: int = 0o700) -> Path:
        home = self.base / f"u{uid}"
        home.mkdir(exist_ok=True)
        os.chown(home, uid, PRIMARY[uid])
        home.chmod(mode)
        return home

    def env(self, uid: int, **extra: str) -> dict[str, str]:
        home = str(self.base / f"u{uid}")
        return {"PATH": f"{os.path.dirname(PY)}:/usr/local/bin:/usr/bin:/bin",
                "HOME": home, "USER": f"u{uid}", "LANG": "C.UTF-8",
                "XDG_CACHE_HOME": f"{home}/.cache", "XDG_CONFIG_HOME": f"{home}/.config",
                "XDG_STATE_HOME": f"{home}/.local/state", "XDG_DATA_HOME": f"{home}/.local/share",
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1",
                "OMP_NUM_THREADS": "1", **extra}

    def record_group(self, pgid: int) -> None:
        self.pgids.append(pgid)
        with open(self.base / "pgids", "a") as fh:
            fh.write(f"{pgid}\n")

    def spawn(self, uid: int, argv: list[str], log: str, **env: str) -> subprocess.Popen:
        """A long-running process of ``uid`` in a process group of its own, output to a log."""
        with open(self.logs / log, "ab") as out:
            proc = subprocess.Popen(argv, user=uid, group=PRIMARY[uid], extra_groups=EXTRA[uid],
                                    env=self.env(uid, **env), cwd=self.base / f"u{uid}",
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, process_group=0)
        self.procs.append(proc)
        self.record_group(proc.pid)
        return proc

    def role(self, uid: int, name: str, args: dict, timeout: float = 60) -> dict:
        """Run a role of this file as ``uid``; its JSON answer."""
        proc = subprocess.Popen([PY, str(Path(__file__).resolve()), name, json.dumps(args)],
                                user=uid, group=PRIMARY[uid], extra_groups=EXTRA[uid],
                                env=self.env(uid), cwd=self.base / f"u{uid}",
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, process_group=0)
        self.record_group(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        lines = out.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"role {name} as uid {uid} exited {proc.returncode}: "
                               f"{err[-3000:]}")
        return json.loads(lines[-1])

    def log_tail(self, name: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join((self.logs / name).read_text(errors="replace").splitlines()[-lines:])
        return ""

    def end_all(self) -> None:
        """SIGTERM every group started (the daemon stops gracefully), SIGKILL what is left."""
        for pgid in reversed(self.pgids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
        for pgid in self.pgids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)

    # -- the steps ---------------------------------------------------------------------
    def set_up(self) -> dict:
        stash = self.base / "stash"
        stash.mkdir(mode=0o700)
        try:
            covered = expose(needed_paths(), stash)
        except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
            why = getattr(exc, "stderr", "") or str(exc)
            raise Skip(f"cannot make the interpreter reachable for other users: {why}") from None
        for uid in (DAEMON, TENANT, HOSTILE, OUTSIDER):
            self.home(uid, 0o755 if uid == DAEMON else 0o700)
        probe = [PY, "-c",
                 "import adloader.daemon.control.broker, adloader.client.master.attach, zmq"]
        try:
            done = subprocess.run(probe, user=OUTSIDER, group=OUTSIDER, extra_groups=[],
                                  env=self.env(OUTSIDER), cwd="/", capture_output=True,
                                  text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            raise Skip(f"cannot start a process as uid {OUTSIDER}: {exc}") from None
        if done.returncode != 0:
            raise Skip(f"uid {OUTSIDER} cannot run {PY} even with {covered} covered: "
                       f"{done.stderr[-2000:]}")
        return {"covered": covered}

    def run(self) -> dict:
        import httpx
        from daemon_harness import free_port, wait_for

        result = {"setup": self.set_up()}
        run_dir = self.base / "run"  # as systemd's RuntimeDirectory=, mode 0750, group GROUP
        run_dir.mkdir()
        os.chown(run_dir, DAEMON, GROUP)
        run_dir.chmod(0o750)
        sock_path = run_dir / "control.sock"
        endpoint = f"ipc://{sock_path}"
        state = self.base / f"u{DAEMON}" / "state"
        port = free_port()
        daemon = self.spawn(DAEMON, [PY, "-m", "adloader", "daemon", "--state-dir",
                                     str(state), "--port", str(port), "--capacity", "2",
                                     "--gpus", "1", "--arrival-window", "0.3",
                                     "--completion-window", "0.3", "--heartbeat", "0.5",
                                     "--socket-group", str(GROUP)],
                            "daemon.log", ADLOADER_ENDPOINT=endpoint)
        url = f"http://127.0.0.1:{port}"

        def healthy():
            if daemon.poll() is not None:
                raise AssertionError(f"the daemon exited with {daemon.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(url + "/healthz", timeout=1).status_code == 200
            return False

        wait_for(healthy, 60, "the daemon to answer /healthz")
        wait_for(sock_path.exists, 10, "the control socket")
        token = (state / "token").read_text().strip()  # root reads it; nobody else can
        rest = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                            timeout=10)
        files = sorted(os.listdir(state))
        result["files"] = {
            name: {"mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "dir": stat.S_ISDIR(
                st.st_mode)} for name in files for st in [os.stat(state / name)]}
        result["state_dir"] = {"mode": stat.S_IMODE(os.stat(state).st_mode),
                               "uid": os.stat(state).st_uid}
        st = os.stat(sock_path)
        result["socket"] = {"mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid,
                            "gid": st.st_gid, "is_socket": stat.S_ISSOCK(st.st_mode)}

        # the tenant's job, started by hand
        home = self.base / f"u{TENANT}"
        stop = home / "stop"
        train = home / "train.py"
        train.write_text(TRAIN.replace("{stop!r}", repr(str(stop))))
        os.chown(train, TENANT, TENANT)
        run = self.spawn(TENANT, [PY, "-m", "adloader", "run", "--", PY, str(train)],
                         "tenant.log", ADLOADER_ENDPOINT=endpoint)

        def hand_job():
            if run.poll() is not None:
                raise AssertionError(f"adloader run exited with {run.returncode}: "
                                     f"{self.log_tail('tenant.log')}")
            return [j for j in rest.get("/v1/jobs").json()
                    if j["spec"]["command"] == ["(started by hand)"]]

        job = wait_for(hand_job, 90, "the tenant's job to register itself")[0]["id"]
        wait_for(lambda: (rest.get(f"/v1/jobs/{job}").json()["iteration"] or 0) > 3, 60,
                 "the tenant's job to train")
        import psutil

        child = psutil.Process(run.pid).children()[0].pid
        self.record_group(os.getpgid(child))
        result["job"] = job
        result["tenant"] = {"run_uid": psutil.Process(run.pid).uids().real,
                            "child_uid": psutil.Process(child).uids().real}
        result["same_user"] = self.role(TENANT, "same-user", {"pid": child})

        before = rest.get(f"/v1/jobs/{job}").json()
        environ = (Path(f"/proc/{child}/environ").read_bytes().split(b"\0"))  # root reads it
        leaked = next(v.split(b"=", 1)[1].decode() for v in environ
                      if v.startswith(b"ADLOADER_JOB_TOKEN="))
        result["hostile"] = self.role(HOSTILE, "hostile", {
            "state": str(state), "files": files, "job": job, "endpoint": endpoint,
            "rest": url, "pids": [run.pid, child], "pgids": [run.pid, os.getpgid(child)],
            "leaked_token": leaked})
        result["outsider"] = self.role(OUTSIDER, "outsider", {"socket": str(sock_path)})
        after = rest.get(f"/v1/jobs/{job}").json()
        wait_for(lambda: rest.get(f"/v1/jobs/{job}").json()["iteration"]
                 > after["iteration"] + 10, 60, "the tenant's job to go on training")
        later = rest.get(f"/v1/jobs/{job}").json()
        result["views"] = {k: {f: v[f] for f in ("state", "iteration", "workers")}
                           for k, v in (("before", before), ("after", after), ("later", later))}
        result["alive_after_attack"] = {"run": run.poll() is None,
                                        "child": psutil.pid_exists(child)}

        stop.touch()  # the tenant's job ends on its own
        result["run_exit"] = run.wait(60)
        wait_for(lambda: rest.get(f"/v1/jobs/{job}").json()["state"] in
                 ("finished", "failed", "lost", "cancelled"), 30, "the daemon to see it end")
        final = rest.get(f"/v1/jobs/{job}").json()
        result["final"] = {k: final[k] for k in ("state", "exit_code", "reason", "iteration")}
        events = rest.get("/v1/events", params={"limit": 5000}).json()
        result["victim_events"] = [e["kind"] for e in events if e["job"] == job]
        result["tenant_log"] = self.log_tail("tenant.log", 5)
        return result


def scenario(base: Path) -> dict:
    sys.path.insert(0, str(HERE))  # daemon_harness
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally below runs
    s = Scenario(base)
    try:
        return s.run()
    except Skip as exc:
        return {"skip": str(exc)}
    except Exception:
        return {"error": traceback.format_exc(), "daemon_log": s.log_tail("daemon.log"),
                "tenant_log": s.log_tail("tenant.log")}
    finally:
        s.end_all()


def main(argv: list[str]) -> int:
    role, arg = argv[1], argv[2]
    out = scenario(Path(arg)) if role == "scenario" else ROLES[role](json.loads(arg))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
