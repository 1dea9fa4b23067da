"""A nested config as flat `a.b.c` keys: how diff compares hyperparameters and how a tracker
(MLflow's params) records them, one rule for both.

Stdlib only, Python 3.8, free of envlock imports: the tracker modules (envlock/integrations)
run in a training script's interpreter, where envlock may be the start-up set's copy.
"""

from __future__ import annotations

from typing import Any

# The class name envlock records beside a config's fields (snapshot_doc.plain): not a field.
CLASS_KEY = "__class__"


# A dict with more keys than this stays one value when flattened: compared whole (`==`), a
# change shown by the keys that differ inside it (runs/diff_values.py), so a 200,000-key config
# is not copied into 200,000 new dotted keys per side (memory that grew with the config's size).
FLAT_KEYS = 10_000


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"model": {"layers": 2}} → {"model.layers": 2}; lists and scalars are values, and so is
    a dict of more than FLAT_KEYS keys below the top."""
    if isinstance(value, dict) and (not prefix or len(value) <= FLAT_KEYS):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == CLASS_KEY:
                continue
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}
