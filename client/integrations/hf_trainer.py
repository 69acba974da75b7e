"""``ElasticTrainer``: the Hugging Face ``Trainer`` on an ``ElasticDataLoader``.

``Trainer`` builds its training loader in ``get_train_dataloader`` as torch's ``DataLoader``
wrapped by Accelerate, which rebuilds any loader it is given as its own; this subclass returns
an ``ElasticDataLoader`` instead, built from the same arguments (batch size, collator, workers,
seed, pin memory, persistent workers), seeded so every rank shares one shuffle and reads its
share. The loader's state (epoch and batches consumed) goes into each checkpoint folder as
``adloader-loader-rank<R>.json`` and comes back on ``train(resume_from_checkpoint=...)``, so a
resumed run reads exactly the batches it had not (``Trainer``'s own fast-forward, which
rebuilds the loader as torch's, is then skipped). With ``ADLOADER_ENDPOINT`` set (a job the
daemon launched, or ``adloader run``) the loader is attached to the node daemon, with the
model's features counted on the model itself (or given: ``ElasticTrainer(..., adloader=
{"model": "Resnet18"})``, the keyword arguments of ``attach``).

Importing this module imports ``transformers``: only a script that uses it needs it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from adloader import env as names
from adloader.client.loader.loader import ElasticDataLoader
from adloader.client.master.attach import attach

__all__ = ["ElasticTrainer"]


def _state_file(folder: str | os.PathLike, rank: int) -> Path:
    return Path(folder) / f"adloader-loader-rank{rank}.json"


class _SaveLoaderState(TrainerCallback):
    """Writes the loader's state beside the checkpoint ``Trainer`` has just saved."""

    def __init__(self, trainer: ElasticTrainer) -> None:
        self._trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        loader = self._trainer.elastic_loader
        if loader is not None:
            folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            if folder.is_dir():
                _state_file(folder, loader.rank).write_text(json.dumps(loader.state_dict()))
        return control


class ElasticTrainer(Trainer):
    """``transformers.Trainer`` whose training loader is an ``ElasticDataLoader``."""

    def __init__(self, *args, adloader: dict | None = None, **kwargs) -> None:
        """``Trainer``'s arguments; ``adloader``: keyword arguments for ``attach`` under a
        daemon (default ``{"model": the model}``: its FLOPs counted on one sample, which
        needs ``sample_shape=`` for inputs that are not one tensor; or a zoo name, or
        ``features=``)."""
        super().__init__(*args, **kwargs)
        self._attach = adloader or {}
        self.elastic_loader: ElasticDataLoader | None = None
        self.master = None  # the job's master, when attached to a daemon
        self._resume_from: str | None = None
        self.add_callback(_SaveLoaderState(self))

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        folder = resume_from_checkpoint
        if folder is True:  # Trainer's own meaning: the newest checkpoint in output_dir
            folder = get_last_checkpoint(self.args.output_dir)
        self._resume_from = folder if isinstance(folder, str | os.PathLike) else None
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def get_train_dataloader(self) -> ElasticDataLoader:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset = self.train_dataset
        collator = self.data_collator
        if hasattr(dataset, "column_names") and self.args.remove_unused_columns:
            dataset = self._remove_unused_columns(dataset, description="training")
        else:
            collator = self._get_collator_with_removed_columns(collator, description="training")
        args = self.args
        workers = args.dataloader_num_workers
        loader = ElasticDataLoader(
            dataset, batch_size=self._train_batch_size, shuffle=True, seed=args.seed,
            collate_fn=collator, num_workers=workers, pin_memory=args.dataloader_pin_memory,
            drop_last=args.dataloader_drop_last,
            persistent_workers=args.dataloader_persistent_workers and workers > 0,
            prefetch_factor=args.dataloader_prefetch_factor if workers > 0 else None)
        if self._resume_from is not None:
            saved = _state_file(self._resume_from, loader.rank)
            if saved.exists():
                loader.load_state_dict(json.loads(saved.read_text()))
                args.ignore_data_skip = True  # the loader resumes itself: no fast-forward
        if self.elastic_loader is None and os.environ.get(names.ENDPOINT):
            self.master = attach(loader, **{"model": self.model, **self._attach})
        self.elastic_loader = loader
        return loader
