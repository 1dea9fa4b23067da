"""The trainer callbacks' pure parts (envlock/integrations/__init__.py): which of a trainer's
logged values become metrics, which tracker names a callback takes. The callbacks themselves
run with the real libraries in tests/integrations/."""

from __future__ import annotations

import math
import sys

import pytest

from envlock.integrations import checked_trackers, lazy_class, numbers_of


class Scalar:
    """A 0-d tensor as the trainers log one: .item() and .ndim, not a number itself."""

    ndim = 0

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


def test_a_trainers_numbers_become_metrics_and_the_rest_is_left_out() -> None:
    logged = {
        "loss": 2.5,
        "step": 4,
        "train/loss": Scalar(1.25),
        "grad_norm": math.nan,
        "lr": math.inf,
        "is_best": True,
        "note": "text",
        "bad name": 1.0,
        "huge": 2**63,
        "x" * 65: 1.0,
    }
    assert numbers_of(logged) == {"loss": 2.5, "step": 4, "train/loss": 1.25}
    assert numbers_of(None) == {}
    assert len(numbers_of({f"m{i}": i for i in range(300)})) == 256


def test_tracker_names_are_checked_when_the_callback_is_built() -> None:
    assert checked_trackers(None) == ()
    assert checked_trackers("wandb") == ("wandb",)
    assert checked_trackers(["mlflow", "wandb"]) == ("mlflow", "wandb")
    with pytest.raises(ValueError, match="'tensorboard' is not one of mlflow, wandb"):
        checked_trackers(("tensorboard",))


def test_the_callback_modules_import_where_no_framework_is_installed() -> None:
    """envlock's own venv has none of transformers, Lightning, accelerate or torch: the
    modules import all the same; the class is built on its framework when first named."""
    import envlock.integrations.accelerate
    import envlock.integrations.lightning
    import envlock.integrations.transformers

    assert not {"transformers", "lightning", "accelerate", "torch"} & set(sys.modules)
    with pytest.raises(ModuleNotFoundError, match="transformers"):
        envlock.integrations.transformers.EnvlockCallback  # noqa: B018
    assert callable(envlock.integrations.accelerate.register)
    assert envlock.integrations.lightning.TRAINER_SETTINGS
    space = {"__name__": "m"}
    assert lazy_class(space, "Thing", "Thing", lambda: int) is int and space["Thing"] is int
    with pytest.raises(AttributeError, match="module 'm' has no attribute 'Other'"):
        lazy_class(space, "Other", "Thing", lambda: int)
