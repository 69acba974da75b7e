"""What a job is called comes from what launched it, the same on every node of the job."""

from __future__ import annotations

import pytest

from adloader.client.master.launcher_name import launcher_name


@pytest.mark.parametrize(("environ", "name"), [
    ({}, None),
    ({"SLURM_JOB_ID": "1234", "SLURM_STEP_ID": "0"}, "slurm-1234.0"),
    ({"SLURM_JOB_ID": "1234"}, "slurm-1234"),  # an sbatch script itself: no step
    ({"SLURM_JOB_ID": "1240", "SLURM_ARRAY_JOB_ID": "1234", "SLURM_ARRAY_TASK_ID": "6",
      "SLURM_STEP_ID": "2"}, "slurm-1234_6.2"),  # an array task: the array's id and index
    ({"TORCHELASTIC_RUN_ID": "exp 7/a"}, "torchrun-exp-7-a"),  # kept as the daemon keeps names
    ({"TORCHELASTIC_RUN_ID": "none"}, None),  # torchrun's default: no name at all
    ({"TORCHELASTIC_RUN_ID": "r1", "SLURM_JOB_ID": "9", "SLURM_STEP_ID": "1"}, "slurm-9.1"),
    ({"ADLOADER_NAME": "resnet-sweep", "SLURM_JOB_ID": "9"}, "resnet-sweep"),
    ({"ADLOADER_NAME": "x" * 100}, "x" * 64),
])
def test_the_launchers_name_for_a_job(environ, name):
    assert launcher_name(environ) == name


def test_a_job_started_by_hand_is_named_by_its_launcher(monkeypatch):
    from adloader.client.master.launcher_name import job_name as _job_name
    from adloader.protocol import JobFeatures

    feats = JobFeatures(model="Resnet18", batch_size=8, gpus=1, flops_g=1.0, params_m=1.0)
    for key in ("ADLOADER_NAME", "SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr("sys.argv", ["train.py"])
    assert _job_name(feats) == "train.py"
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_STEP_ID", "3")
    assert _job_name(feats) == "slurm-77.3"
