"""`EnvlockCallback` for the Lightning `Trainer`.

    from envlock.integrations.lightning import EnvlockCallback
    trainer = L.Trainer(callbacks=[ModelCheckpoint(dirpath="ckpt"), EnvlockCallback()])

Whenever a checkpoint is saved, `envlock-snapshot.json` beside it, in the directory of each
`ModelCheckpoint` (of the trainer's log directory when it has none yet): the module's
`hparams` (and the datamodule's), the trainer's settings, and the metrics logged so far
(`self.log(...)`: trainer.callback_metrics) with the step and epoch. One snapshot per
directory, of the latest save. Lightning (`lightning.pytorch`, else `pytorch_lightning`) is
imported when the class is first named.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from envlock.integrations import checked_trackers, lazy_class, numbers_of, record

# The Trainer's settings that change what it computes (read when present).
TRAINER_SETTINGS = (
    "max_epochs",
    "max_steps",
    "accumulate_grad_batches",
    "gradient_clip_val",
    "precision",
    "world_size",
    "num_nodes",
)


def run_config(trainer: Any, pl_module: Any, directories: list[str]) -> dict[str, Any]:
    """{"hparams", "datamodule", "trainer", "run_paths"}: what the run was told."""
    config: dict[str, Any] = {"hparams": dict(getattr(pl_module, "hparams", None) or {})}
    datamodule_hparams = getattr(getattr(trainer, "datamodule", None), "hparams", None)
    if datamodule_hparams:
        config["datamodule"] = dict(datamodule_hparams)
    settings = {k: getattr(trainer, k, None) for k in TRAINER_SETTINGS}
    config["trainer"] = {k: v for k, v in settings.items() if v is not None}
    config["run_paths"] = {"checkpoint_dirs": directories}
    return config


def logged_metrics(trainer: Any) -> dict[str, int | float]:
    metrics = dict(getattr(trainer, "callback_metrics", None) or {})
    metrics.update(step=trainer.global_step, epoch=trainer.current_epoch)
    return numbers_of(metrics)


def checkpoint_dirs(trainer: Any) -> list[str]:
    """Where the trainer's ModelCheckpoints save (their dirpath is set by the time one saves)."""
    found = []
    for callback in getattr(trainer, "checkpoint_callbacks", None) or ():
        dirpath = getattr(callback, "dirpath", None)
        if dirpath and str(dirpath) not in found:
            found.append(str(dirpath))
    return found or [str(trainer.default_root_dir)]


class _Recorder:
    def __init__(self, trackers: Any = None, data: Mapping[str, Any] | None = None) -> None:
        self.trackers = checked_trackers(trackers)
        self.data = data

    def save(self, trainer: Any, pl_module: Any) -> list[str]:
        if not getattr(trainer, "is_global_zero", True):
            return []  # rank 0 writes (the API decides so too): no directory made elsewhere
        written = []
        directories = checkpoint_dirs(trainer)
        config = run_config(trainer, pl_module, directories)
        metrics = logged_metrics(trainer)
        for directory in directories:
            os.makedirs(directory, exist_ok=True)  # the checkpoint file is written after this
            path = record(
                directory, config=config, metrics=metrics, data=self.data, trackers=self.trackers
            )
            if path is not None:
                written.append(path)
        return written


def _framework() -> Any:
    try:
        import lightning.pytorch as framework
    except ImportError:
        import pytorch_lightning as framework
    return framework


def _callback_class() -> type:
    framework = _framework()

    class EnvlockCallback(framework.Callback):  # type: ignore[name-defined]
        """Writes envlock-snapshot.json beside the checkpoints the trainer saves.

        `trackers`: names of envlock.integrations modules ("mlflow", "wandb") each written
        snapshot is handed to; `data`: {name: path} of datasets to fingerprint besides the
        profile's [data]."""

        def __init__(self, trackers: Any = None, data: Mapping[str, Any] | None = None):
            super().__init__()
            self.recorder = _Recorder(trackers, data)

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            self.recorder.save(trainer, pl_module)

    return EnvlockCallback


def __getattr__(name: str) -> Any:
    # The class subclasses Lightning's Callback: built when first named.
    return lazy_class(globals(), name, "EnvlockCallback", _callback_class)
