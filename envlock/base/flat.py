"""A nested config as flat `a.b.c` keys: how diff compares hyperparameters and how a tracker
(MLflow's params) records them, one rule for both.

Stdlib only, Python 3.8, free of envlock imports: the tracker modules (envlock/integrations)
run in a training script's interpreter, where envlock may be the start-up set's copy.
"""

from __future__ import annotations

from typing import Any

# The class name envlock records beside a config's fields (snapshot_doc.plain): not a field.
CLASS_KEY = "__class__"


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"model": {"layers": 2}} → {"model.layers": 2}; lists and scalars are values."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == CLASS_KEY:
                continue
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}
