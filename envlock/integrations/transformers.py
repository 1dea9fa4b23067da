"""`EnvlockCallback` for the Hugging Face `transformers.Trainer`.

    from envlock.integrations.transformers import EnvlockCallback
    trainer = Trainer(model, args, train_dataset=…, callbacks=[EnvlockCallback()])

At every save, `checkpoint-N/envlock-snapshot.json` beside the weights: the
`TrainingArguments` (through the one secret rule; `output_dir`, `logging_dir` and the like
filed under `run_paths`, not as hyperparameters), the model's config, and the numbers of the
trainer's log history (loss, learning_rate, grad_norm, epoch, the step; samples/s, steps/s
and tokens/s once the trainer reports them: the last checkpoint's snapshot is written again
with them when training ends). transformers is imported when the class is first named.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from envlock.integrations import checked_trackers, lazy_class, numbers_of, record, warn

# TrainingArguments fields that say where the run writes or reads, not how it trains: two
# runs differ in them by construction (checkpoint/runfiles.py files the same ones apart).
RUN_PATH_ARGS = ("output_dir", "logging_dir", "resume_from_checkpoint")
# What the Trainer logs once, when training ends (speed_metrics("train", …)).
FINAL_KEYS = ("train_runtime", "train_samples_per_second")


def training_config(args: Any, model: Any = None, samples: int | None = None) -> dict[str, Any]:
    """The run's config as the snapshot records it: {"training_args", "run_paths", "model",
    "train_dataset"}. to_dict() already hides the *_token fields; envlock.snapshot() then
    applies the secret rule to the whole."""
    values = dict(args.to_dict())
    paths = {k: values.pop(k) for k in RUN_PATH_ARGS if k in values}
    paths = {k: v for k, v in paths.items() if v is not None}
    # transformers 4 defaulted run_name to output_dir: then it names a path, not a run.
    if values.get("run_name") is not None and values.get("run_name") in paths.values():
        paths["run_name"] = values.pop("run_name")
    config: dict[str, Any] = {"training_args": values, "run_paths": paths}
    model_config = getattr(model, "config", None)
    if model_config is not None:
        config["model"] = model_config
    if samples is not None:
        config["train_dataset"] = {"samples": samples}
    return config


def dataset_size(dataloader: Any) -> int | None:
    """How many examples the Trainer trains on (len of its dataloader's dataset), when the
    dataset has a length (an IterableDataset has none)."""
    try:
        return len(dataloader.dataset)
    except (AttributeError, TypeError):
        return None


def trainer_metrics(state: Any) -> dict[str, int | float]:
    """The latest value of each number in the trainer's log history, and its step."""
    merged: dict[str, Any] = {}
    for entry in getattr(state, "log_history", None) or ():
        if isinstance(entry, Mapping):
            merged.update(entry)
    merged["step"] = state.global_step
    return numbers_of(merged)


class _Recorder:
    """What the callback does, apart from the class transformers wants it to be."""

    def __init__(self, trackers: Any = None, data: Mapping[str, Any] | None = None) -> None:
        self.trackers = checked_trackers(trackers)
        self.data = data
        self.saved: str | None = None  # the checkpoint directory last written
        self.saved_step = -1
        self.samples: int | None = None  # the train dataset's size, when it has one

    def save(self, args: Any, state: Any, model: Any) -> str | None:
        if not getattr(state, "is_world_process_zero", True):
            return None  # the API would return None too; this spares other nodes the look
        directory = os.path.join(args.output_dir, f"checkpoint-{state.global_step}")
        if not os.path.isdir(directory):  # a hyperparameter search's run-N/ folder
            warn(f"no checkpoint directory {directory} to write the snapshot into")
            return None
        self.saved, self.saved_step = directory, state.global_step
        return record(
            directory,
            config=training_config(args, model, self.samples),
            metrics=trainer_metrics(state),
            data=self.data,
            trackers=self.trackers,
        )

    def final(self, args: Any, state: Any, model: Any) -> str | None:
        """The last checkpoint's snapshot again, with the speeds the trainer logs at the end,
        when that checkpoint is of the last step and still there."""
        last = (state.log_history or [{}])[-1]
        if not all(k in last for k in FINAL_KEYS) or self.saved_step != state.global_step:
            return None
        return self.save(args, state, model)


def _callback_class() -> type:
    from transformers import TrainerCallback

    class EnvlockCallback(TrainerCallback):
        """Writes envlock-snapshot.json into each checkpoint-N/ the Trainer saves.

        `trackers`: names of envlock.integrations modules ("mlflow", "wandb") each written
        snapshot is handed to; `data`: {name: path} of datasets to fingerprint besides the
        profile's [data]."""

        def __init__(self, trackers: Any = None, data: Mapping[str, Any] | None = None):
            self.recorder = _Recorder(trackers, data)

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.recorder.samples = dataset_size(kwargs.get("train_dataloader"))

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.recorder.save(args, state, kwargs.get("model"))

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.recorder.final(args, state, kwargs.get("model"))

    return EnvlockCallback


def __getattr__(name: str) -> Any:
    # The class subclasses transformers' TrainerCallback: built when first named.
    return lazy_class(globals(), name, "EnvlockCallback", _callback_class)
