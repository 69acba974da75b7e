"""Every ``ADLOADER_*`` environment variable, declared once (as adaptdl's ``env.py``).

Three families, never sharing a name: the *job contract* (what the daemon's launcher or
``adloader run`` hands a job, read by ``adloader.client.master.attach``), the *REST client*
(what ``adloader jobs`` and friends read), and the *daemon settings* (``ADLOADER_`` + a
setting's name in upper case, e.g. ``ADLOADER_PORT``; see ``adloader.config``); besides
them, what the downward API tells a daemon about its pod (``ADLOADER_POD_IP``). A job's
control token and the REST bearer token are different secrets with different names.
"""

from __future__ import annotations

# -- the job contract (launcher / `adloader run` -> attach) ---------------------------
ENDPOINT = "ADLOADER_ENDPOINT"  # the daemon's ZeroMQ control endpoint
JOB = "ADLOADER_JOB"  # the job's id
JOB_TOKEN = "ADLOADER_JOB_TOKEN"  # the job's own control token (proves it is the job)
WORKERS = "ADLOADER_WORKERS"  # the loader's initial worker count
GPU_IDS = "ADLOADER_GPU_IDS"  # the GPUs the daemon placed the job on
SUPERVISOR = "ADLOADER_SUPERVISOR"  # "launcher" | "run": who reports the exit status
CHECKPOINT_DIR = "ADLOADER_CHECKPOINT_DIR"  # where Pause checkpoints go
RESUME = "ADLOADER_RESUME"  # a checkpoint to resume from
MODEL = "ADLOADER_MODEL"  # the zoo model of a job that does not name one to attach()
# what to call the job (before the launcher's name: client.master.launcher_name)
NAME = "ADLOADER_NAME"

JOB_CONTRACT = (ENDPOINT, JOB, JOB_TOKEN, WORKERS, GPU_IDS, SUPERVISOR, CHECKPOINT_DIR, RESUME,
                MODEL, NAME)

# -- the REST client (adloader submit | jobs | cancel | ...) --------------------------
URL = "ADLOADER_URL"  # the daemon's REST address
API_TOKEN = "ADLOADER_TOKEN"  # the REST bearer token (never handed to a job)
TOKEN_FILE = "ADLOADER_TOKEN_FILE"  # a file holding it
CONFIG = "ADLOADER_CONFIG"  # the daemon's settings file (also tells clients where it is)

# -- the reference training job and the benches ---------------------------------------
STEP_PROFILE = "ADLOADER_STEP_PROFILE"  # device profile for emulated GPU steps
STEP_SCALE = "ADLOADER_STEP_SCALE"
DATA = "ADLOADER_DATA"
GPU_LOCK_DIR = "ADLOADER_GPU_LOCK_DIR"  # where emulated GPUs' lock files live
CORE_FACTOR = "ADLOADER_CORE_FACTOR"  # the emulated GPU node: its cores for each real one
EMULATED_TRAINER = "ADLOADER_EMULATED_TRAINER"  # its trainer's costs a batch (JSON)
CGROUP_ROOT = "ADLOADER_CGROUP_ROOT"  # a cgroup tree laid out elsewhere (tests; host/cgroup)

# -- the daemon's pod (Kubernetes' downward API: status.podIP, status.hostIP) -----------
# equal: the pod uses its node's network, and the metrics listener stays on loopback
POD_IP = "ADLOADER_POD_IP"
HOST_IP = "ADLOADER_HOST_IP"

SETTING_PREFIX = "ADLOADER_"  # + a daemon setting's name, e.g. ADLOADER_PORT


def setting(key: str) -> str:
    """The variable that sets the daemon setting ``key``: ``setting("port")`` is
    ``ADLOADER_PORT`` (``adloader.config``)."""
    return SETTING_PREFIX + key.upper()
