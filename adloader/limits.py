"""Bounds on every number and string a tenant can hand the daemon (REST or ZeroMQ).

A shared node validates at its edge: a value past one of these is refused there with a
message naming the field and the bound, so nothing extreme (a 2^70 iteration count, a
50 MB command line, a NaN rate) ever reaches the scheduler, the store or the TPM. They are
generous: a real job is orders of magnitude inside each.
"""

from __future__ import annotations

MAX_WORKERS = 1024  # d: loading workers one job may run (torch warns past the cores)
MAX_GPUS = 1024  # n
MAX_BATCH = 1 << 20  # b, per GPU
MAX_ITERATIONS = 10**12
MAX_EPOCHS = 10**6
MAX_FLOPS_G = 1e6  # f: forward GFLOPs per sample (1 PFLOP)
MAX_PARAMS_M = 1e6  # M: million parameters (a trillion)
MAX_STEP_S = 86_400.0  # 1/μ: one step of a day
MAX_RATE = 1e9  # samples/s
MAX_COUNTER = 2**53  # iterations done, sequence numbers: exact in a JSON double
MAX_PID = 2**31 - 1
EXIT_CODE_RANGE = (-(2**31), 2**31 - 1)  # an int32, as waitpid reports it

MAX_JOB_ID = 128  # characters
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@:-]*$"
MAX_TOKEN = 256
MAX_NAME = 64
MAX_TEXT = 4096  # a reason, a traceback's last lines, a log tail in a message
MAX_ARGS = 1024  # command-line arguments
MAX_ARG = 16 * 1024  # characters in one argument, environment value or path
MAX_ENV = 256  # environment variables of a job
MAX_SPEC_BYTES = 256 * 1024  # a whole job spec as JSON
MAX_BODY_BYTES = 1024 * 1024  # any REST request body
MAX_SAMPLES = 10**10  # N: samples in a dataset
MAX_SAMPLE_BYTES = 1 << 30  # one sample's raw bytes
MAX_SEED = 2**63 - 1
