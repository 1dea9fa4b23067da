"""The hyperparameters a training directory keeps outside its weights, read without torch.

Hugging Face `save_pretrained` writes `config.json` and `generation_config.json` (peft's
`adapter_config.json`, a tokenizer's `tokenizer_config.json` ...: RUN_JSON); the Trainer
adds `trainer_state.json`, `training_args.bin` (a pickled `TrainingArguments`) and
`optimizer.pt`; accelerate's `save_state` writes `optimizer.bin` and `custom_checkpoint_N.pkl`
(the state of objects registered for checkpointing). Two runs that differ only in a learning
rate or a `rope_theta` differ only here, so `envlock diff` compares these files field by field.
Every pickle goes through archive.py (scan, restricted unpickler, limits); every JSON file
through jsondata.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envlock.base.limits import printable_errors
from envlock.base.secrets import redact_config
from envlock.base.untrusted import open_untrusted
from envlock.checkpoint.archive import load_raw_pickle, load_torch_zip
from envlock.checkpoint.jsondata import read_json
from envlock.checkpoint.summary import plain
from envlock.checkpoint.tree import is_optimizer, key_text

# The sidecars read as configuration, field by field: one table. Any other file of the
# directory is compared by a digest of its bytes (otherfiles.py; YAML among them).
RUN_JSON = (
    "config.json",
    "generation_config.json",
    "trainer_state.json",
    "adapter_config.json",  # peft: r, lora_alpha, target_modules, ...
    "tokenizer_config.json",
    "special_tokens_map.json",
    "preprocessor_config.json",
    "processor_config.json",
)
OPTIMIZERS = ("optimizer.pt", "optimizer.bin")
_PICKLED = re.compile(r"^(training_args\.bin|custom_checkpoint_\d+\.pkl)$")
# Measurements of the run, not its configuration: every two runs differ in them. How far it
# got (global_step, epoch) is its progress, compared once, from inspect's reading.
_MEASURED = {"trainer_state.json": ("log_history", "global_step", "epoch")}
# Where a run wrote, not how it trained: two runs differ in them by construction. run_name is
# one too when it is only the output path (transformers 4.x defaulted it to output_dir).
_RUN_PATHS = {
    "training_args.bin": ("output_dir", "logging_dir"),
    "trainer_state.json": ("best_model_checkpoint",),
}
_NAMED_BY_PATH = ("run_name",)


def is_run_file(name: str) -> bool:
    """Whether `name` is a file this module reads hyperparameters from."""
    return name in RUN_JSON or name in OPTIMIZERS or bool(_PICKLED.match(name))


def run_files(directory: Path) -> list[Path]:
    """The run files of `directory` itself, by name: whatever each is (a link out, a FIFO)
    is judged when it is read (untrusted.py), never skipped in silence."""
    return [child for child in sorted(directory.iterdir()) if is_run_file(child.name)]


def newest_run_dir(directory: Path) -> Path | None:
    """`directory` if it holds run files, else its newest `checkpoint-N` (or any) subfolder
    that does: a Trainer's output_dir keeps them in checkpoint-2/, checkpoint-4/, ..."""
    if run_files(directory):
        return directory
    subdirs = [p for p in directory.iterdir() if p.is_dir() and not p.is_symlink() and run_files(p)]
    if not subdirs:
        return None
    return max(subdirs, key=lambda p: (_step(p.name), p.stat().st_mtime, p.name))


def _step(name: str) -> int:
    digits = re.findall(r"\d+", name)
    return int(digits[-1]) if digits and len(digits[-1]) < 20 else -1


def hyperparameters(directory: Path, follow_links: bool = False) -> dict[str, dict[str, Any]]:
    """`{file name: {field: plain value}}` for each run file of `directory`."""
    found: dict[str, dict[str, Any]] = {}
    for path in run_files(directory):
        with printable_errors(path):
            fields = _read(path, follow_links)
        if fields:
            found[path.name] = redact_config(fields)  # training args may hold a token
    return found


def split_run_paths(
    found: dict[str, dict[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """`hyperparameters()` split into (settings, run paths): output_dir, logging_dir, the best
    checkpoint's path, and a run_name that only repeats one of them."""
    settings: dict[str, dict[str, Any]] = {}
    paths: dict[str, dict[str, Any]] = {}
    for name, fields in found.items():
        path_keys = set(_RUN_PATHS.get(name, ())) & set(fields)
        written = {fields[k] for k in path_keys if isinstance(fields[k], str)}
        path_keys |= {
            k for k in _NAMED_BY_PATH if isinstance(fields.get(k), str) and fields[k] in written
        }
        if path_keys:
            paths[name] = {k: v for k, v in fields.items() if k in path_keys}
        rest = {k: v for k, v in fields.items() if k not in path_keys}
        if rest:
            settings[name] = rest
    return settings, paths


def _read(path: Path, follow_links: bool) -> dict[str, Any] | None:
    if path.name in RUN_JSON:
        document = read_json(path, "JSON file", within=path.parent, follow_links=follow_links)
        if not isinstance(document, dict):
            return None
        dropped = _MEASURED.get(path.name, ())
        return {k: v for k, v in document.items() if k not in dropped}
    root = _load(path, follow_links)
    if path.name in OPTIMIZERS:
        return _param_groups(root) if is_optimizer(root) else None
    value = simple(plain(root))
    return value if isinstance(value, dict) else {"value": value}


def _load(path: Path, follow_links: bool) -> Any:
    within = path.parent
    with open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f:
        head = f.read(4)
    # accelerate writes its .pkl files with torch.save (a zip); plain pickle.dump is read too.
    load = load_torch_zip if head == b"PK\x03\x04" else load_raw_pickle
    return load(path, within=within, follow_links=follow_links).root


def _param_groups(optimizer: dict[Any, Any]) -> dict[str, Any] | None:
    # lr, betas, eps, weight_decay ... per group; "params" are only the ids of its tensors.
    groups = optimizer["param_groups"]
    if not isinstance(groups, list):
        return None
    out = {}
    for i, group in enumerate(groups):
        if isinstance(group, dict):
            fields = {key_text(k): v for k, v in group.items() if k != "params"}
            out[f"param_groups.{i}"] = simple(plain(fields))
    return out


def simple(value: Any) -> Any:
    """A plain value with enum-like objects (`SchedulerType("linear")`) shown as their value
    and `__class__` names dropped: a pickled TrainingArguments reads like its JSON."""
    if isinstance(value, dict):
        args = value.get("args")
        if set(value) == {"__class__", "args"} and isinstance(args, list) and len(args) == 1:
            return simple(args[0])
        return {k: simple(v) for k, v in value.items() if k != "__class__"}
    if isinstance(value, list):
        return [simple(v) for v in value]
    return value
