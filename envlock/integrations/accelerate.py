"""A save-state hook for 🤗 accelerate: `accelerator.save_state(dir)` writes the snapshot.

    from envlock.integrations.accelerate import register
    register(accelerator, config=args, metrics=lambda: {"loss": last_loss})
    accelerator.save_state("ckpt/step-100")    # … and ckpt/step-100/envlock-snapshot.json

`register` adds a pre hook (`accelerator.register_save_state_pre_hook`) and returns its
handle (`handle.remove()` takes it off). The snapshot's config is the script's own `config`
with the accelerator's settings (processes, mixed precision, gradient accumulation) and the
config of each prepared model that has one; its metrics the step and what `metrics` (a dict,
or a function called at each save) gives. Nothing of accelerate is imported here: the hook
reads the accelerator it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envlock.integrations import checked_trackers, numbers_of, record

# The accelerator's settings that change what a run computes (read when present).
ACCELERATOR_SETTINGS = (
    "num_processes",
    "mixed_precision",
    "gradient_accumulation_steps",
    "distributed_type",
)


def accelerator_settings(accelerator: Any) -> dict[str, Any]:
    found = {k: getattr(accelerator, k, None) for k in ACCELERATOR_SETTINGS}
    # DistributedType and PrecisionType are str enums: their value, not their repr.
    return {k: getattr(v, "value", v) for k, v in found.items() if v is not None}


class SaveStateHook:
    """The pre hook: called by save_state with (models, weights, output_dir)."""

    def __init__(
        self,
        accelerator: Any,
        config: Any = None,
        metrics: Any = None,
        data: Mapping[str, Any] | None = None,
        trackers: Any = None,
    ) -> None:
        self.accelerator = accelerator
        self.config = config
        self.metrics = metrics
        self.data = data
        self.trackers = checked_trackers(trackers)

    def __call__(self, models: list[Any], weights: list[Any], output_dir: str) -> None:
        if not getattr(self.accelerator, "is_main_process", True):
            return  # save_state runs its hooks on every process; rank 0 writes
        record(
            str(output_dir),
            config=self.run_config(models),
            metrics=self.numbers(),
            data=self.data,
            trackers=self.trackers,
        )

    def run_config(self, models: list[Any]) -> dict[str, Any]:
        config: dict[str, Any] = {"accelerator": accelerator_settings(self.accelerator)}
        if self.config is not None:
            config["run"] = self.config
        configs = [getattr(m, "config", None) for m in models]
        if any(c is not None for c in configs):
            config["models"] = configs
        return config

    def numbers(self) -> dict[str, int | float]:
        given = self.metrics() if callable(self.metrics) else self.metrics
        values = dict(given or {})
        values.setdefault("step", getattr(self.accelerator, "step", None))
        values.setdefault("save_iteration", getattr(self.accelerator, "save_iteration", None))
        return numbers_of(values)


def register(
    accelerator: Any,
    config: Any = None,
    metrics: Any = None,
    data: Mapping[str, Any] | None = None,
    trackers: Any = None,
) -> Any:
    """Have `accelerator.save_state(dir)` write dir/envlock-snapshot.json (rank 0); returns
    the hook's handle. `config`: the run's hyperparameters (a dict, Namespace, dataclass…);
    `metrics`: {name: number}, or a function returning it at each save; `data`: {name:
    path} of datasets to fingerprint besides the profile's [data]; `trackers`: ("mlflow",
    "wandb") to hand each snapshot to."""
    hook = SaveStateHook(accelerator, config, metrics, data, trackers)
    return accelerator.register_save_state_pre_hook(hook)
