"""What each member of a checkpoint directory holds: model weights, or state that is not.

Parameters are what a model holds. A Trainer's `rng_state.pth` and accelerate's
`random_states_N.pkl` hold generator states, `scheduler.pt` and `custom_checkpoint_N.pkl` other
training state, `optimizer_0/` (a DCP directory) optimizer state; none of them are parameters.
A Hub download often holds `model.safetensors` and `pytorch_model.bin` with the same weights:
the second is a duplicate, counted once.
"""

from __future__ import annotations

import re
from typing import Any

from envlock.checkpoint.inert import TensorInfo

_RNG = re.compile(r"^(rng_state.*\.pth|random_states_\d+\.pkl)$")
_STATE = re.compile(
    r"^(scheduler.*\.(pt|bin)|custom_checkpoint_\d+\.pkl|training_args\.bin|sampler.*\.bin|"
    r"scaler\.pt)$"
)
_OPTIMIZER_DIR = re.compile(r"^optimizer(_\d+)?$")
_MODEL = re.compile(r"^(model|pytorch_model)\b.*\.(safetensors|bin|index\.json)$")


def section_kinds(root: dict[str, Any]) -> dict[str, str]:
    """{member name: kind} for the members of a directory that are not model weights."""
    kinds: dict[str, str] = {}
    for name in root:
        if _RNG.match(name):
            kinds[name] = "rng"
        elif _STATE.match(name):
            kinds[name] = "state"
        elif _OPTIMIZER_DIR.match(name):
            kinds[name] = "optimizer"
    seen: dict[tuple[tuple[str, str, tuple[int | None, ...]], ...], str] = {}
    for name, value in root.items():
        signature = _signature(value) if _MODEL.match(name) else None
        if not signature:
            continue
        if signature in seen:
            kinds[name] = f"duplicate:{seen[signature]}"
        else:
            seen[signature] = name
    return kinds


def _signature(value: Any) -> tuple[tuple[str, str, tuple[int | None, ...]], ...] | None:
    # A flat state dict's keys, dtypes and shapes, in key order (files order them differently).
    if not isinstance(value, dict) or not value:
        return None
    if not all(isinstance(v, TensorInfo) for v in value.values()):
        return None
    return tuple(sorted((str(k), v.dtype, v.shape) for k, v in value.items()))
