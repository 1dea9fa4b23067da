"""The snapshot written by the trainer itself: callbacks for the frameworks people train with.

    from envlock.integrations.transformers import EnvlockCallback   # Hugging Face Trainer
    from envlock.integrations.lightning import EnvlockCallback      # Lightning Trainer
    from envlock.integrations.accelerate import register            # accelerator.save_state

Each module imports its framework only when its callback is first used (never on envlock's
CLI path) and writes `envlock-snapshot.json` through `envlock.snapshot()` at every save: the
run's config (hyperparameters, the model's config), the trainer's numbers, the datasets of
the profile's [data]. Only global rank 0 writes, as the API decides.

One implementation for two homes: these modules run in envlock's own Python and, in a
training environment, under the stdlib-only `envlock` API each generation carries (which
registers this folder as its `envlock.integrations`: envlock/startup/envlock_api). So they are
stdlib only, Python 3.8+, apart from the framework each imports lazily.

`trackers=("mlflow", "wandb")` on a callback hands each written snapshot to
`envlock.integrations.<name>.log_snapshot(path)`, on the rank that wrote it.
"""

from __future__ import annotations

import importlib
import math
import numbers
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any

# The trackers a callback can hand its snapshot to: a module of this package each.
TRACKERS = ("mlflow", "wandb")
# snapshot_doc.METRIC_NAME and MAX_METRICS, as envlock.snapshot() checks them: a trainer's
# own names that do not fit are left out rather than failing the save.
_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,63}")
_MAX_METRICS = 256


def checked_trackers(trackers: Iterable[str] | None) -> tuple[str, ...]:
    """The tracker names a callback was given, checked when it is built (not at its first
    save, hours later); a plain string is one name."""
    if trackers is None:
        return ()
    names = (trackers,) if isinstance(trackers, str) else tuple(trackers)
    for name in names:
        if name not in TRACKERS:
            raise ValueError(
                'envlock trackers: {!r} is not one of {} (trackers=("mlflow", "wandb"), '
                "or leave it out)".format(name, ", ".join(TRACKERS))
            )
    return names


def numbers_of(values: Mapping[str, Any] | None) -> dict[str, int | float]:
    """The finite numbers among a trainer's logged values (0-d tensors and numpy scalars
    through .item()), under names envlock.snapshot() takes; anything else is left out."""
    kept: dict[str, int | float] = {}
    for name, value in (values or {}).items():
        number = _number(value)
        if number is not None and isinstance(name, str) and _METRIC.fullmatch(name):
            kept[name] = number
    return dict(list(kept.items())[-_MAX_METRICS:])


def _number(value: Any) -> int | float | None:
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", 0) == 0 and not isinstance(value, numbers.Real):
        try:
            value = item()
        except Exception:  # a tensor on a device that cannot answer: no number
            return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = int(value) if isinstance(value, numbers.Integral) else float(value)
    if isinstance(number, float) and not math.isfinite(number):
        return None
    if isinstance(number, int) and abs(number) >= 2**63:
        return None
    return number


def record(
    directory: str,
    *,
    config: Any = None,
    metrics: Mapping[str, Any] | None = None,
    data: Mapping[str, Any] | None = None,
    trackers: tuple[str, ...] = (),
) -> str | None:
    """Write DIRECTORY/envlock-snapshot.json through envlock.snapshot() (rank 0; None on
    the others) and hand it to each tracker. The `envlock` imported is whichever this
    process has: envlock itself, or the API of the generation it runs in."""
    import envlock

    written = envlock.snapshot(directory, config=config, metrics=metrics, data=data)
    if written is None:
        return None
    path = str(written)
    for name in trackers:
        importlib.import_module("envlock.integrations." + name).log_snapshot(path)
    return path


def warn(message: str) -> None:
    """A callback never stops the training it watches for a snapshot it cannot place: it
    says why on stderr."""
    sys.stderr.write("envlock: " + message + "\n")


def lazy_class(space: dict[str, Any], name: str, wanted: str, build: Any) -> Any:
    """A module's `__getattr__` for a class built on its framework's base class: the
    framework is imported when the class is first named, never when the module is."""
    if name != wanted:
        raise AttributeError("module {!r} has no attribute {!r}".format(space["__name__"], name))
    space[name] = build()
    return space[name]
