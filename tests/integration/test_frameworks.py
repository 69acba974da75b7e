"""ElasticDataLoader under the frameworks users fit with, the real packages (Lightning,
Accelerate, the Hugging Face Trainer with a tiny model made here, nothing downloaded).

docs/frameworks.md's recipes run as printed; fits with workers read every sample once an epoch;
``ddp_spawn`` over 2 CPU ranks reads disjoint shards; each framework's checkpoint carries the
loader's position and a run resumed mid-epoch reads exactly the batches the interrupted one had
not; a fit under a real daemon is resized mid-fit and still reads every sample once. Each job
runs in its own process (as users run them), a script written here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_harness import Daemon, attached_script, wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "frameworks.md"
RECIPES = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def _run(tmp_path: Path, name: str, body: str, *args: str, timeout: float = 300) -> str:
    path = tmp_path / name
    path.write_text(body)
    done = subprocess.run([sys.executable, str(path), *args], cwd=tmp_path, text=True,
                          capture_output=True, timeout=timeout)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _last_json(out: str):
    return json.loads([line for line in out.splitlines() if line.startswith(("[", "{"))][-1])


FRAMEWORKS = ("lightning", "accelerate", "transformers")


@pytest.mark.parametrize("recipe", range(3), ids=FRAMEWORKS)
def test_the_recipes_in_docs_run_as_printed(tmp_path, recipe):
    assert len(RECIPES) == 3, "docs/frameworks.md: one recipe a framework"
    framework = FRAMEWORKS[recipe]
    out = _run(tmp_path, f"recipe_{framework}.py", RECIPES[recipe])
    assert f"{framework}: 32 steps" in out  # 512 samples / 32 a batch × 2 epochs


@pytest.mark.parametrize("recipe", range(3), ids=FRAMEWORKS)
def test_the_recipes_attach_under_a_daemon(tmp_path, recipe):
    """Each recipe as printed, under ``adloader run`` beside a real daemon: the job registers
    (its features counted on the recipe's model), trains, and ends finished."""
    framework = FRAMEWORKS[recipe]
    script = tmp_path / f"recipe_{framework}.py"
    script.write_text(RECIPES[recipe])
    daemon = Daemon(tmp_path / "state").start()
    try:
        env = {**os.environ, "ADLOADER_STATE_DIR": str(daemon.state_dir),
               "ADLOADER_ENDPOINT": daemon.endpoint}
        done = subprocess.run([sys.executable, "-m", "adloader", "run", "--", sys.executable,
                               str(script)], env=env, cwd=tmp_path, text=True,
                              capture_output=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert f"{framework}: 32 steps" in done.stdout
        [job] = wait_for(lambda: [j for j in daemon.http.get("/v1/jobs").json()
                                  if j["state"] == "finished"], 30, "the job to be finished")
        assert job["name"] == script.name and job["iteration"] == 32
        assert [e for e in daemon.events("attached") if e["job"] == job["id"]]
    finally:
        daemon.stop()


LIGHTNING = """
import json, sys
import lightning as L
import torch
from torch.utils.data import TensorDataset
from adloader import ElasticDataLoader

OUT, CRASH, RESUME, DEVICES, INJECT = sys.argv[1], int(sys.argv[2]), sys.argv[3], \\
    int(sys.argv[4]), sys.argv[5] == "inject"

class Crash(Exception):
    pass

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.seen = []

    def training_step(self, batch, i):
        x, idx = batch
        self.seen.append(idx.tolist())
        return self.net(x).pow(2).mean()

    def on_train_batch_end(self, out, batch, i):
        if self.global_step == CRASH:
            self.trainer.save_checkpoint(OUT + ".ckpt")
            raise Crash()

    def on_train_end(self):
        loader = self.trainer.train_dataloader
        with open(f"{OUT}.{self.global_rank}", "w") as f:
            json.dump({"seen": self.seen, "elastic": type(loader).__name__,
                       "sampler": type(loader.sampler).__name__}, f)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        data = TensorDataset(torch.randn(64, 4), torch.arange(64))
        return ElasticDataLoader(data, batch_size=8, shuffle=True, seed=0, num_workers=2)

if __name__ == "__main__":
    model = Model()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=DEVICES, logger=False,
                        strategy="ddp_spawn" if DEVICES > 1 else "auto",
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, use_distributed_sampler=INJECT)
    try:
        trainer.fit(model, ckpt_path=OUT + ".ckpt" if RESUME == "resume" else None)
    except Crash:
        pass
    if DEVICES == 1:
        print(json.dumps(model.seen))
"""


def test_lightning_fits_with_workers_and_resumes_mid_epoch_exactly(tmp_path):
    out = str(tmp_path / "run")
    whole = _last_json(_run(tmp_path, "fit.py", LIGHTNING, out, "-1", "no", "1", "own"))
    assert len(whole) == 16
    for epoch in (whole[:8], whole[8:]):  # every sample once an epoch, shuffled anew
        assert sorted(sum(epoch, [])) == list(range(64))
    assert whole[:8] != whole[8:]
    # stopped after 11 steps (3 into the 2nd epoch), its checkpoint taken there, resumed
    first = _last_json(_run(tmp_path, "fit.py", LIGHTNING, out, "11", "no", "1", "own"))
    rest = _last_json(_run(tmp_path, "fit.py", LIGHTNING, out, "-1", "resume", "1", "own"))
    assert (len(first), len(rest)) == (11, 5)
    assert first + rest == whole  # the rest of the epoch: nothing repeated, skipped, reordered


@pytest.mark.parametrize("sampler", ["own", "inject"])
def test_lightning_ddp_spawn_ranks_read_disjoint_shards(tmp_path, sampler):
    out = str(tmp_path / "run")
    _run(tmp_path, "fit.py", LIGHTNING, out, "-1", "no", "2", sampler)
    ranks = [json.loads(Path(f"{out}.{r}").read_text()) for r in (0, 1)]
    assert all(r["elastic"] == "ElasticDataLoader" for r in ranks)
    # own: the loader's shard of its seeded shuffle; inject: Lightning's DistributedSampler
    assert ranks[0]["sampler"] == ("RankShuffle" if sampler == "own" else "DistributedSampler")
    for epoch in (slice(0, 4), slice(4, 8)):  # 64 samples / 2 ranks / 8 a batch
        mine = [sum(r["seen"][epoch], []) for r in ranks]
        assert not set(mine[0]) & set(mine[1])
        assert sorted(mine[0] + mine[1]) == list(range(64))


ACCELERATE = """
import json, sys
import torch
from accelerate import Accelerator
from torch.utils.data import TensorDataset
from adloader import ElasticDataLoader

out, crash_at, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume"
accelerator = Accelerator(cpu=True, project_dir=out)
net = torch.nn.Linear(4, 1)
model, optimizer = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.01))
data = TensorDataset(torch.randn(64, 4), torch.arange(64))
loader = ElasticDataLoader(data, batch_size=8, shuffle=True, seed=0, num_workers=2)
accelerator.register_for_checkpointing(loader)
if resume:
    accelerator.load_state(out + "/state")
seen = []
while loader.epoch < 2:
    for x, idx in loader:
        seen.append(idx.tolist())
        if len(seen) == crash_at:
            accelerator.save_state(out + "/state")
            print(json.dumps(seen))
            sys.exit(0)
print(json.dumps(seen))
"""


def test_accelerate_save_state_carries_the_loader_and_load_state_resumes_exactly(tmp_path):
    out = str(tmp_path)
    whole = _last_json(_run(tmp_path, "acc.py", ACCELERATE, out, "0", "no"))
    first = _last_json(_run(tmp_path, "acc.py", ACCELERATE, out, "11", "no"))
    rest = _last_json(_run(tmp_path, "acc.py", ACCELERATE, out, "0", "resume"))
    assert len(whole) == 16 and sorted(sum(whole[8:], [])) == list(range(64))
    assert (len(first), len(rest)) == (11, 5)
    assert first + rest == whole


TRAINER = """
import json, shutil, sys
import torch
from torch.utils.data import Dataset
from transformers import TrainerCallback, TrainingArguments
from adloader.client.hf_trainer import ElasticTrainer

out, crash_at, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "resume"

class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"x": torch.full((4,), float(i)), "labels": torch.tensor(float(i)),
                "idx": torch.tensor(i)}

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.seen = []

    def forward(self, x, labels, idx):
        self.seen.append(idx.tolist())
        return {"loss": (self.net(x).squeeze(-1) - labels).pow(2).mean() * 1e-4}

class Crash(Exception):
    pass

class CrashAfterSave(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if crash_at and state.global_step == crash_at:
            raise Crash()

args = TrainingArguments(output_dir=out, num_train_epochs=2, per_device_train_batch_size=8,
                         use_cpu=True, report_to=[], logging_strategy="no",
                         remove_unused_columns=False, disable_tqdm=True,
                         dataloader_num_workers=2,
                         save_strategy="steps" if crash_at else "no", save_steps=crash_at or 1)
model = Tiny()
trainer = ElasticTrainer(model=model, args=args, train_dataset=Numbers(),
                         callbacks=[CrashAfterSave()])
try:
    trainer.train(resume_from_checkpoint=True if resume else None)
except Crash:
    pass
print(json.dumps(model.seen))
"""


def test_hf_trainer_checkpoints_carry_the_loader_and_a_resume_reads_exactly_the_rest(tmp_path):
    out = str(tmp_path / "out")
    whole = _last_json(_run(tmp_path, "hf.py", TRAINER, str(tmp_path / "whole"), "0", "no"))
    first = _last_json(_run(tmp_path, "hf.py", TRAINER, out, "11", "no"))
    assert (Path(out) / "checkpoint-11" / "adloader-loader-rank0.json").is_file()
    rest = _last_json(_run(tmp_path, "hf.py", TRAINER, out, "0", "resume"))
    assert len(whole) == 16 and sorted(sum(whole[:8], [])) == list(range(64))
    assert (len(first), len(rest)) == (11, 5)
    assert first + rest == whole


UNDER_DAEMON = """
import json, time
import lightning as L
import torch
from torch.utils.data import TensorDataset
from adloader import ElasticDataLoader, attach

class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.seen, self.workers = [], set()

    def training_step(self, batch, i):
        x, idx = batch
        self.seen.extend(idx.tolist())
        self.workers.add(self.trainer.train_dataloader.num_workers)
        time.sleep(0.01)
        return self.net(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        data = TensorDataset(torch.randn(2400, 4), torch.arange(2400))
        loader = ElasticDataLoader(data, batch_size=8, shuffle=True, seed=0, num_workers=1)
        attach(loader, model="smResnet20", epochs=2)
        return loader

model = Model()
L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
          enable_progress_bar=False, enable_model_summary=False,
          use_distributed_sampler=False).fit(model)
print("RESULT " + json.dumps({"once": [sorted(model.seen[e * 2400:(e + 1) * 2400])
                                         == list(range(2400)) for e in (0, 1)],
                              "workers": sorted(model.workers)}), flush=True)
"""


def test_a_lightning_fit_under_the_daemon_is_resized_mid_fit_and_reads_every_sample_once(
        tmp_path):
    daemon = Daemon(tmp_path / "state").start()
    try:
        script = tmp_path / "fit.py"
        script.write_text(UNDER_DAEMON)
        fit = daemon.submit("lightning", iterations=600, command=[sys.executable, str(script)])
        wait_for(lambda: (daemon.job(fit)["iteration"] or 0) > 20, 120, "the fit to train")
        before = daemon.job(fit)["workers"]
        other = daemon.submit("other", iterations=100000,
                              command=attached_script(tmp_path, "other.py"))
        wait_for(lambda: [e for e in daemon.events("resize", fit)
                          if e["data"]["workers"] != before], 60, "a resize of the fit")
        assert daemon.job(fit)["state"] == "running"  # resized mid-fit, not at its end
        daemon.http.delete(f"/v1/jobs/{other}")
        wait_for(lambda: daemon.job(fit)["state"] in ("finished", "failed"), 180,
                 "the fit to end")
        view = daemon.job(fit)
        log = daemon.http.get(f"/v1/jobs/{fit}/log").text
        assert view["state"] == "finished" and view["exit_code"] == 0, log[-3000:]
        result = json.loads(log.split("RESULT ", 1)[1].splitlines()[0])
        assert result["once"] == [True, True]  # nothing lost or repeated across the resize
        assert len(result["workers"]) >= 2, result  # the loader itself ran at both counts
    finally:
        daemon.stop()
