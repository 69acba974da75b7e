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

DOC = Path(__file__).resolve().parents[3] / "docs" / "frameworks.md"
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


PREPARED = """
import json, os, sys
import torch
from accelerate import Accelerator
from torch.utils.data import Dataset, SequentialSampler, Subset
from adloader import ElasticDataLoader
from adloader.client.integrations.accelerate import ElasticAccelerator
from adloader.errors import InputError

out, phase, save_at = sys.argv[1], sys.argv[2], int(sys.argv[3])

class Numbers(Dataset):
    def __len__(self):
        return 96

    def __getitem__(self, i):
        return torch.full((4,), float(i)), i, os.getpid()

def refusal(loader):
    try:
        accelerator.prepare(loader)
    except InputError as e:
        return str(e)

early = ElasticDataLoader(Numbers(), batch_size=4, shuffle=True, seed=0)  # no process group yet
accelerator = ElasticAccelerator(cpu=True)
refused = [refusal(early), refusal(ElasticDataLoader(Numbers(), batch_size=4,
                                                     sampler=SequentialSampler(range(96))))]
net = torch.nn.Linear(4, 1)
loader = ElasticDataLoader(Numbers(), batch_size=4, shuffle=True, seed=0, num_workers=1)
model, optimizer, prepared = accelerator.prepare(
    net, torch.optim.SGD(net.parameters(), lr=0.01), loader)
if phase == "resume":
    accelerator.load_state(out + "/state")
batches = []
while prepared.epoch < 2:
    epoch = prepared.epoch
    for x, idx, pid in prepared:
        step = len(batches)
        batches.append({"epoch": epoch, "idx": idx.tolist(), "pids": sorted(set(pid.tolist())),
                        "device": x.device.type,
                        "end": accelerator.gradient_state.end_of_dataloader,
                        "remainder": accelerator.gradient_state.remainder})
        accelerator.backward(model(x).pow(2).mean())
        optimizer.step()
        optimizer.zero_grad()
        if phase == "whole" and step == 2:
            prepared.resize(2)  # mid-epoch 0, on the loader prepare returned
        if phase == "whole" and step == 16:
            prepared.resize(0)  # mid-epoch 1: the rest read in this process
        if phase == "whole" and step + 1 == save_at:
            accelerator.save_state(out + "/state")
odd = accelerator.prepare(ElasticDataLoader(Subset(Numbers(), range(95)), batch_size=4, seed=0))
odd_remainders = sorted({accelerator.gradient_state.remainder for _ in odd})
given = ElasticDataLoader(Numbers(), batch_size=4, shuffle=True, seed=0)
theirs = Accelerator.prepare_data_loader(accelerator, given)  # Accelerate's own
theirs = [sum(len(idx) for _, idx, _ in theirs), hasattr(theirs, "resize")]
with open(f"{out}/{phase}.{accelerator.process_index}.json", "w") as f:
    json.dump({"batches": batches, "same": prepared is loader, "main": os.getpid(),
               "elastic": isinstance(prepared, ElasticDataLoader), "refused": refused,
               "device": accelerator.device.type, "processes": accelerator.num_processes,
               "odd": odd_remainders, "theirs": theirs}, f)
"""


def _two_ranks(tmp_path: Path, *args: str) -> list[dict]:
    script = tmp_path / "prepared.py"
    script.write_text(PREPARED)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", str(script), str(tmp_path), *args],
                          cwd=tmp_path, text=True, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads((tmp_path / f"{args[0]}.{r}.json").read_text()) for r in (0, 1)]


def test_accelerate_prepare_keeps_the_loader_sharded_resizable_and_its_position(tmp_path):
    """``accelerator.prepare(model, optimizer, loader)`` as every Accelerate script has it, on
    2 CPU processes (torchrun, gloo), next to Accelerate's own ``prepare_data_loader``, which
    rebuilds the loader: the loader prepared is the loader given; the ranks read
    disjoint shards covering the data each epoch, on ``accelerator.device``; ``resize`` on it
    mid-epoch changes the processes that read and loses or repeats nothing; the last batch of
    each epoch is Accelerate's end of dataloader; ``save_state`` mid-epoch and ``load_state``
    in a new run read exactly the batches the first had not, on each rank."""
    whole = _two_ranks(tmp_path, "whole", "7")
    for rank, run in enumerate(whole):
        assert run["processes"] == 2 and run["same"] and run["elastic"]
        early, own_sampler = run["refused"]
        assert f"reads rank 0 of 1, this is process {rank} of 2" in early
        assert "SequentialSampler" in own_sampler
        batches = run["batches"]
        assert len(batches) == 24  # 96 samples / 2 ranks / 4 a batch × 2 epochs
        assert {b["device"] for b in batches} == {run["device"]}
        assert [b["end"] for b in batches] == ([False] * 11 + [True]) * 2
        assert {b["remainder"] for b in batches} == {0}  # 96 % (4 × 2): no partial batch
        assert run["odd"] == [-1]  # 95 samples: rank 1's last one repeats, not at the tail
        assert run["theirs"] == [24, False]  # Accelerate's own: 1/2 of the share, no resize
        pids = [b["pids"] for b in batches]
        first = pids[0]
        assert run["main"] not in first  # one worker process at first
        later = {p for ps in pids[3:17] for p in ps} - set(first)
        assert len(later) >= 2, pids  # resize(2): two new worker processes read
        assert pids[-1] == [run["main"]], pids  # resize(0): read in the training process
    for epoch in (0, 1):
        mine = [[i for b in run["batches"] if b["epoch"] == epoch for i in b["idx"]]
                for run in whole]
        assert not set(mine[0]) & set(mine[1])  # disjoint shards
        assert sorted(mine[0] + mine[1]) == list(range(96))  # nothing lost or repeated
    assert (tmp_path / "state" / "adloader-loader-rank1.json").is_file()
    rest = _two_ranks(tmp_path, "resume", "0")
    for run, resumed in zip(whole, rest, strict=True):
        assert [b["idx"] for b in resumed["batches"]] == [b["idx"] for b in run["batches"][7:]]


ON_DEVICE = """
import json
import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import TensorDataset
from adloader import ElasticDataLoader
from adloader.client.integrations.accelerate import ElasticAccelerator, prepare_loader
from adloader.errors import InputError

class OnMeta(ElasticAccelerator):  # a device no batch is on: placement shows
    @property
    def device(self):
        return torch.device("meta")

class TheirsOnMeta(Accelerator):  # an accelerator made elsewhere: prepare_loader
    @property
    def device(self):
        return torch.device("meta")

class Mine(ElasticDataLoader):
    def name(self):
        return "mine"

data = TensorDataset(torch.randn(20, 4), torch.arange(20))
accelerator = OnMeta(cpu=True)
loader = Mine(data, batch_size=8, seed=0, num_workers=1)
prepared = accelerator.prepare(loader)
seen = []
for x, i in prepared:
    state = accelerator.gradient_state
    seen.append([x.device.type, i.device.type, state.end_of_dataloader, state.remainder])
kept = accelerator.prepare(ElasticDataLoader(data, batch_size=8), device_placement=[False])
theirs = prepare_loader(TheirsOnMeta(cpu=True), ElasticDataLoader(data, batch_size=8))
split = OnMeta(cpu=True, dataloader_config=DataLoaderConfiguration(split_batches=True))
try:
    split.prepare(ElasticDataLoader(data, batch_size=8))
    refused = None
except InputError as e:
    refused = str(e)
print(json.dumps({"seen": seen, "same": prepared is loader, "type": type(prepared).__name__,
                  "own": prepared.name(), "kept": next(iter(kept))[0].device.type,
                  "theirs": next(iter(theirs))[0].device.type, "refused": refused}))
"""


def test_accelerate_prepare_places_batches_on_the_accelerator_s_device(tmp_path):
    """Each batch of a prepared loader is on ``accelerator.device`` (a meta device here, which
    no batch is on unless placed), unless ``device_placement`` says not; the epoch's end and
    its remainder are Accelerate's; a subclass of the loader keeps its methods;
    ``prepare_loader`` does the same for an accelerator made elsewhere; an accelerator that
    splits batches over processes is refused."""
    got = _last_json(_run(tmp_path, "on_device.py", ON_DEVICE))
    assert got["seen"] == [["meta", "meta", False, 4], ["meta", "meta", False, 4],
                           ["meta", "meta", True, 4]]  # 20 samples, 8 a batch: 4 in the last
    assert got["same"] and got["type"] == "AcceleratedMine" and got["own"] == "mine"
    assert (got["kept"], got["theirs"]) == ("cpu", "meta")
    assert "split_batches=True" in got["refused"]


TRAINER = """
import json, shutil, sys
import torch
from torch.utils.data import Dataset
from transformers import TrainerCallback, TrainingArguments
from adloader.client.integrations.hf_trainer import ElasticTrainer

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
        time.sleep(0.01)  # pacing: a slow step, so the fit still runs when resized
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
        daemon.http.post(f"/v1/jobs/{other}/cancel")
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
