"""One description of a run per side of a diff, built by the reader `inspect` uses.

A side is a snapshot file, a lock, a checkpoint file, or a directory: a checkpoint (any
layout `inspect` reads, DCP and accelerate-FSDP included), a run directory keeping several
(the newest is chosen as choose.py says, and named), or one holding only a snapshot. What a
side holds becomes a `Side`: the environment (snapshot or lock), the checkpoint's structure
(every tensor key with dtype and shape, the parameter count), its configuration from every
source, its optimizer hyperparameters, its progress, the files it came from, and what could
not be read. Every file passes the untrusted-bytes gate; a refusal (a FIFO, a link out, a
limit) ends the diff, a corrupt file is listed as unread so the diff says it is incomplete.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from envlock import ui
from envlock.base.cuda import is_cuda_library
from envlock.base.flat import flatten
from envlock.base.limits import Refused
from envlock.base.secrets import redact_value
from envlock.base.untrusted import FOLLOW_HINT, Unsafe, read_untrusted
from envlock.checkpoint import formats
from envlock.checkpoint import summary as summaries
from envlock.checkpoint.choose import (
    Choice,
    choose_checkpoint,
    has_members,
    newest_first,
)
from envlock.checkpoint.otherfiles import other_files
from envlock.checkpoint.reader import inspect_checkpoint
from envlock.checkpoint.runfiles import (
    hyperparameters,
    is_run_file,
    run_files,
    simple,
    split_run_paths,
)
from envlock.checkpoint.tally import is_state_dict
from envlock.checkpoint.tree import children, is_container, is_optimizer, key_text
from envlock.checkpoint.weights import digests as weight_digests
from envlock.errors import EnvlockError, UsageError
from envlock.lock.policy import SHOWN
from envlock.lock.read import Lock, parse_lock
from envlock.runs.diff_types import RecordedCache, SnapshotRecord
from envlock.runs.snapshot_file import SNAPSHOT_FILE, load_snapshot, snapshot_lock, snapshots_below

# What a side without a snapshot (a lock, a checkpoint alone) has recorded: nothing.
NOTHING_RECORDED = SnapshotRecord()


@dataclass(frozen=True)
class Checkpoint:
    """What `inspect` read of the checkpoint a side compares: structure, config, progress."""

    path: str
    tensors: dict[str, str]  # key → "dtype [shape]" (layout and qscheme when not plain)
    params: int
    config: dict[str, Any]  # {entry: value}: config/args/hparams in the pickle(s)
    optimizer: dict[str, Any]  # {path: {param_groups.N: {lr, betas, ...}}}
    progress: dict[str, Any]
    files: tuple[str, ...]
    chosen_from: tuple[str, ...] = ()  # the alternatives it was chosen among, newest first
    reason: str = ""  # how it was chosen, for people
    digests: dict[str, str] | None = None  # key → sha256 of its contents (diff --weights)
    # key → the first key whose storage it shares (tied weights: lm_head and embed_tokens)
    shared: dict[str, str] = field(default_factory=dict)
    # {entry: value}: what else the file keeps (Lightning's loops, callbacks, lr_schedulers)
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Side:
    label: str
    lock: Lock | None
    snapshot: SnapshotRecord | None = None
    checkpoint_config: dict[str, Any] | None = None
    # {file: {field: value}} from config.json, training_args.bin, optimizer param_groups, ...
    run_files: dict[str, Any] | None = None
    # {file: {field: path}}: where the run wrote (training_args.bin's output_dir, ...)
    run_paths: dict[str, Any] | None = None
    checkpoint: Checkpoint | None = None
    unread: tuple[str, ...] = ()  # what could not be read: the comparison is incomplete
    # {name: sha256} of the directory's files no reader parses (None: a file, not a folder)
    file_digests: dict[str, str] | None = None
    files_not_compared: tuple[tuple[str, str], ...] = ()  # (name, why): past the bounds

    @property
    def is_run(self) -> bool:
        """A run (snapshot or checkpoint), not a lock: it has a configuration to compare."""
        return self.snapshot is not None or self.checkpoint is not None or bool(self.run_files)

    def files(self) -> list[str]:
        return list(self.checkpoint.files) if self.checkpoint else []

    @property
    def record(self) -> SnapshotRecord:
        """The snapshot's record; an empty one for a side without a snapshot."""
        return self.snapshot or NOTHING_RECORDED

    def packages(self) -> dict[str, str]:
        if self.snapshot is not None:
            return dict(self.snapshot.packages)
        return self.lock.versions() if self.lock else {}

    def torch(self) -> dict[str, Any]:
        packages = self.packages()
        found = self.record.torch
        version = found.version or packages.get("torch")
        if not version:
            return {}
        label = version.partition("+")[2] or None
        cuda_libs = sorted(f"{name}=={v}" for name, v in packages.items() if is_cuda_library(name))
        return {
            "torch": version,
            "local label": found.local if found.has_local else label,
            "CUDA": found.cuda,
            "cuDNN": found.cudnn,
            "CUDA libraries": ", ".join(cuda_libs) or None,
            "triton": packages.get("triton") or packages.get("pytorch-triton"),
        }

    def scripts(self) -> dict[str, str | None]:
        if self.snapshot is not None:
            return dict(self.snapshot.scripts)
        return dict((self.lock.meta.get("scripts") if self.lock else None) or {})

    def config(self) -> dict[str, Any]:
        """Every configuration value of the run, flat, each under the source it came from,
        through the one secret rule (a name says secret: hidden; any other: shown). Built
        once per side (a config of 200,000 keys is compared and its coverage read)."""
        return self._config

    @cached_property
    def _config(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        pickled = self.checkpoint.config if self.checkpoint else self.checkpoint_config
        if pickled:
            merged.update({f"checkpoint.{k}": v for k, v in pickled.items()})
        if self.checkpoint:
            merged.update({f"checkpoint.{k}": v for k, v in self.checkpoint.optimizer.items()})
        run_config = self.record.config
        if run_config is not None:
            merged["run"] = run_config
        flat = flatten(merged)
        for key in self.own_paths(flat):
            del flat[key]
        for name, fields in (self.run_files or {}).items():
            flat.update({f"{name}: {k}": v for k, v in flatten(fields).items()})
        return {k: redact_value(k, v) for k, v in flat.items()}

    def own_paths(self, flat: dict[str, Any]) -> list[str]:
        """The run config's values that name the directory this side is (`run.ckpt =
        runs/a` for a snapshot in runs/a), and those a trainer's callback filed under
        `run_paths` (envlock/integrations): where the run wrote, as `output_dir` is."""
        if self.snapshot is None:
            return []
        here = Path(self.label)
        here = (here if here.is_dir() else here.parent).resolve()
        return [
            k
            for k, v in flat.items()
            if k.startswith(RUN_PATHS_KEY)
            or (k.startswith("run.") and isinstance(v, str) and names_dir(v, here))
        ]

    def state(self) -> dict[str, Any]:
        """The checkpoint's training state (summary.training_state), flat; where the run
        wrote (a callback's best_model_path) is a run path, in paths()."""
        return {k: v for k, v in self._state.items() if not written_path(k, v)}

    @cached_property
    def _state(self) -> dict[str, Any]:
        found = self.checkpoint.state if self.checkpoint else {}
        flat = flatten({f"checkpoint.{k}": v for k, v in found.items()})
        return {k: redact_value(k, v) for k, v in flat.items()}

    def paths(self) -> dict[str, Any]:
        flat: dict[str, Any] = {k: v for k, v in self._state.items() if written_path(k, v)}
        for name, fields in (self.run_paths or {}).items():
            flat.update({f"{name}: {k}": v for k, v in flatten(fields).items()})
        if self.snapshot is not None and self.record.config is not None:
            whole = flatten({"run": self.record.config})
            flat.update({f"snapshot: {k}": whole[k] for k in self.own_paths(whole)})
        return flat

    def cache(self) -> RecordedCache | None:
        return self.record.cache

    def hardware(self) -> dict[str, Any]:
        record = self.record
        gpus = ", ".join(f"{g.name} (sm {g.capability})" for g in record.gpus)
        return {
            "GPUs": gpus or None,
            "driver": record.driver,
            "python": record.python,
            "machine": record.machine,
            "host": record.host,
        }

    def to_json(self) -> dict[str, Any]:
        ckpt = self.checkpoint
        return {
            "path": self.label,
            "checkpoint": ckpt.path if ckpt else None,
            "chosen_from": list(ckpt.chosen_from) if ckpt else [],
            "files": self.files(),
            "unread": list(self.unread),
        }


# Where envlock's trainer callbacks file a run's paths in its config (output_dir, …).
RUN_PATHS_KEY = "run.run_paths."


def written_path(key: str, value: Any) -> bool:
    """A value of the training state that says where the run wrote: an absolute path (a
    callback's best_model_path, dirpath), or a key naming one (best_k_models' keys)."""
    return (isinstance(value, str) and value.startswith("/")) or "/" in key


def names_dir(value: str, directory: Path) -> bool:
    """Whether `value`, a path as the run was given it (relative to where it started, or
    absolute), names `directory`: its parts are the directory's last ones."""
    parts = [p for p in Path(value).parts if p not in (".", "")]
    if not parts or len(value) > 4096 or ".." in parts:
        return False
    if Path(value).is_absolute():
        return Path(value) == directory
    return list(directory.parts[-len(parts) :]) == parts


# -- loading ------------------------------------------------------------------------------
def load_side(path: str, follow_links: bool = False, weights: bool = False) -> Side:
    """One side of a diff; every file it reads passes the untrusted-bytes gate, and those of a
    directory must lie inside it unless `follow_links`. With `weights`, the contents of its
    checkpoint's tensors are digested too (streamed: weights.py)."""
    target = Path(path)
    follow = {"follow_links": follow_links}
    if target.is_dir():
        return _directory_side(target, follow_links, weights)
    if not os.path.lexists(target):  # anything else that exists is judged when read
        raise UsageError(f"{target}: no such file or directory")
    if target.name.startswith("pylock.") and target.suffix == ".toml":
        # A lock from elsewhere is data too: validated, read to be shown.
        return Side(str(target), parse_lock(target, read_lock_text(target), SHOWN))
    if target.suffix == ".json" and not target.name.endswith(".index.json"):
        snapshot = load_snapshot(target, **follow)
        return Side(str(target), snapshot_lock(snapshot, target), SnapshotRecord.of(snapshot))
    if target.name.endswith(formats.CHECKPOINT_NAMES):
        # A checkpoint file: what inspect reads of it, and the snapshot beside it if any.
        beside = target.parent / SNAPSHOT_FILE
        found = load_snapshot(target.parent, **follow) if os.path.lexists(beside) else None
        lock = snapshot_lock(found, beside) if found is not None else None
        record = SnapshotRecord.of(found) if found is not None else None
        checkpoint, unread = read_checkpoint(Choice(target), follow_links, weights)
        return Side(str(target), lock, record, checkpoint=checkpoint, unread=unread)
    raise UsageError(
        f"{target}: not a snapshot, checkpoint or lock",
        hint="pass envlock-snapshot.json, a checkpoint file or dir, or pylock.<name>.toml",
    )


def _directory_side(target: Path, follow_links: bool, weights: bool = False) -> Side:
    has_snapshot = os.path.lexists(target / SNAPSHOT_FILE)
    snapshot = load_snapshot(target, follow_links=follow_links) if has_snapshot else None
    choice = choose_checkpoint(target, single=True)
    checkpoint, unread = read_checkpoint(choice, follow_links, weights) if choice else (None, ())
    # Run files (config.json, training_args.bin, ...) lie beside the chosen checkpoint.
    run_dir = (
        None if choice is None else choice.path if choice.path.is_dir() else choice.path.parent
    )
    run, paths = run_hyperparameters(run_dir, follow_links) if run_dir else (None, None)
    at = target
    if snapshot is None and run_dir is not None and os.path.lexists(run_dir / SNAPSHOT_FILE):
        # A trainer's output directory: the snapshot its callback wrote is in the checkpoint
        # chosen (checkpoint-N/), not beside the checkpoints.
        snapshot, at = load_snapshot(run_dir, follow_links=follow_links), run_dir
    if snapshot is None and checkpoint is None and run is None and paths is None and not unread:
        below = snapshots_below(target)
        if below:  # a tracker's download: its newest snapshot, named as the side's label
            return _directory_side(newest_first(below)[0], follow_links, weights)
        raise UsageError(
            f"{target}: holds neither {SNAPSHOT_FILE} nor a checkpoint",
            hint="pass a snapshot file, a checkpoint dir or a lock",
        )
    lock = snapshot_lock(snapshot, at) if snapshot is not None else None
    record = SnapshotRecord.of(snapshot) if snapshot is not None else None
    digests: dict[str, str] | None = None
    skipped: tuple[tuple[str, str], ...] = ()
    if run_dir is not None and choice is not None:
        read = {Path(f).resolve() for f in (checkpoint.files if checkpoint else ())}
        read |= {p.resolve() for p in (*run_files(run_dir), *choice.candidates, choice.path)}
        if formats.is_checkpoint_dir(choice.path):  # its files are the checkpoint's, read or unread
            read |= {p.resolve() for p in choice.path.iterdir()}
        read |= {(target / SNAPSHOT_FILE).resolve(), (run_dir / SNAPSHOT_FILE).resolve()}
        # Every file of the directory given, but the checkpoints not chosen (older steps).
        digests, skipped = other_files(target, read, follow_links)
    return Side(str(target), lock, record, None, run, paths, checkpoint, unread, digests, skipped)


def read_lock_text(path: Path) -> str:
    try:
        return read_untrusted(path, "lock").decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None


def read_checkpoint(
    choice: Choice, follow_links: bool, weights: bool = False
) -> tuple[Checkpoint | None, tuple[str, ...]]:
    """What `inspect` reads of the chosen checkpoint, and what it could not read. A refusal
    (hostile bytes, a link out, a limit) is raised: the diff ends, as inspect would."""
    path = choice.path
    if path.is_dir() and not path.is_symlink() and not has_members(path):
        return None, ()  # run files only (config.json ...): read as run files, not weights
    refuse_links_out(path, follow_links)
    try:
        report = inspect_checkpoint(path, follow_links=follow_links)
        doc = summaries.summary(report, "*")
    except Refused:
        raise
    except EnvlockError as exc:  # corrupt, truncated, not a checkpoint: listed, never skipped
        said = exc.message if exc.message.startswith(str(path)) else f"{path}: {exc.message}"
        return None, (said,)
    directory = report.format == "directory"
    unread = tuple(n for n in doc["notes"] if n.startswith("skipped "))
    digested = None
    if weights:
        with ui.status(f"reading the weights of {path}") as count:
            digested = weight_digests(report, follow_links, count)
    if digested is not None:
        unread += by_cause(digested.unread)
    try:
        state = member_state(report.root) if directory else summaries.training_state(report.root)
    except Refused as exc:
        raise exc.at(str(path)) from None
    checkpoint = Checkpoint(
        path=str(path),
        tensors={r["key"]: tensor_text(r) for r in doc["keys"]},
        params=doc["tensors"]["params"],
        config=single_member(doc["config"] or {}) if directory else doc["config"] or {},
        optimizer=optimizer_settings(report.root, directory),
        progress=dict(doc["progress"]),
        files=tuple(f["path"] for f in doc["files"]),
        chosen_from=tuple(str(p) for p in choice.candidates),
        reason=choice.describe(),
        digests=digested.digests if digested is not None else None,
        shared={k: row["keys"][0] for row in doc["shared_storage"] for k in row["keys"][1:]},
        state=state,
    )
    return checkpoint, tuple(f"{path}: {n}" for n in unread)


def by_cause(unread: tuple[str, ...]) -> tuple[str, ...]:
    """`key: why` of the tensors --weights could not read, one line per cause: "contents
    of 22 tensors (model.0.weight, …): why", not one cause 22 times."""
    keys: dict[str, list[str]] = {}
    for item in unread:
        key, _, why = item.partition(": ")
        keys.setdefault(why, []).append(key)
    said = []
    for why, named in keys.items():
        if len(named) == 1:
            said.append(f"contents of {named[0]}: {why}")
            continue
        more = ", …" if len(named) > 3 else ""
        said.append(f"contents of {len(named):,} tensors ({', '.join(named[:3])}{more}): {why}")
    return tuple(said)


def refuse_links_out(path: Path, follow_links: bool) -> None:
    """A checkpoint member that leads out of its directory is refused, never skipped: a diff
    that left it out would compare less than it says."""
    if follow_links:
        return
    directory = path if path.is_dir() and not path.is_symlink() else path.parent
    members = sorted(directory.iterdir()) if path.is_dir() else [path]
    named = formats.MEMBER_SUFFIXES
    for member in members:
        out = not member.resolve().is_relative_to(directory.resolve())
        # A link to a device or FIFO is refused for what it is when it is opened.
        if member.is_symlink() and member.is_file() and out and member.name.endswith(named):
            raise Unsafe(f"{member} is a link out of its directory", FOLLOW_HINT)


def tensor_text(row: dict[str, Any]) -> str:
    kind = [row[k] for k in ("layout", "qscheme") if row.get(k) not in (None, "strided")]
    dtype = f"{row['dtype']} ({', '.join(kind)})" if kind else row["dtype"]
    shape = ", ".join("*" if d is None else str(d) for d in row["shape"])
    return f"{dtype} [{shape}]"


def single_member(config: dict[str, Any]) -> dict[str, Any]:
    """A directory's config is keyed `member:entry`; with one member carrying config, by the
    entry alone, so runs whose files are named by step compare. Run files (config.json,
    training_args.bin) are read as run files, under their own names: not twice."""
    config = {k: v for k, v in config.items() if not is_run_file(k.partition(":")[0])}
    members = {k.partition(":")[0] for k in config if ":" in k}
    if len(members) == 1 and all(":" in k for k in config):
        return {k.partition(":")[2]: v for k, v in config.items()}
    return config


def member_state(root: Any) -> dict[str, Any]:
    """A directory's training state: each member's, keyed `member:entry` (by the entry alone
    when one member keeps any, as single_member does for the config)."""
    found = {
        f"{key_text(member)}:{entry}": value
        for member, sub in (root.items() if isinstance(root, dict) else ())
        for entry, value in summaries.training_state(sub).items()
    }
    return single_member(found)


def optimizer_settings(root: Any, directory: bool) -> dict[str, Any]:
    """`{path: {param_groups.N: {lr, betas, ...}}}` of every optimizer in the checkpoint's
    tree (the seed's `optimizer_state_dict`, a Lightning `optimizer_states` list); a
    directory's optimizer.pt/.bin are run files, read there."""
    if is_optimizer(root):  # an optimizer.pt given as a file
        return {"optimizer": param_groups(root)}
    found: dict[str, Any] = {}
    level: list[tuple[str, Any]] = [("", root)]
    for _ in range(4):
        nxt = []
        for path, obj in level:
            if is_state_dict(obj):  # thousands of tensors, no optimizer among them
                continue
            for key, value in children(obj):
                where = f"{path}.{key}" if path else key
                if directory and not path and is_run_file(key):
                    continue
                if is_optimizer(value):
                    groups = param_groups(value)
                    if groups:
                        found[where] = groups
                elif is_container(value):
                    nxt.append((where, value))
        level = nxt
    return found


def param_groups(optimizer: dict[Any, Any]) -> dict[str, Any]:
    # lr, betas, eps, weight_decay ... per group; "params" are only the ids of its tensors.
    groups = optimizer["param_groups"]
    out: dict[str, Any] = {}
    if isinstance(groups, dict):  # DCP flattens the list: {"0.lr": …, "0.params": […]}
        fields: dict[str, dict[str, Any]] = {}
        for key, value in groups.items():
            index, _, name = str(key).partition(".")
            if name and name.partition(".")[0] != "params":
                fields.setdefault(f"param_groups.{index}", {})[name] = value
        return {k: simple(summaries.plain(v)) for k, v in fields.items()}
    for i, group in enumerate(groups if isinstance(groups, list | tuple) else ()):
        if isinstance(group, dict):
            fields = {k: v for k, v in group.items() if k != "params"}
            out[f"param_groups.{i}"] = simple(summaries.plain(fields))
    return out


def run_hyperparameters(
    directory: Path, follow_links: bool = False
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """config.json, training_args.bin, optimizer param_groups, ... of `directory` (read
    without torch, never executed), and apart from them the paths the run wrote to
    (output_dir, ...); None for either it has none of."""
    found = hyperparameters(directory, follow_links)  # its secrets redacted by the reader
    settings, paths = split_run_paths(found)
    return settings or None, paths or None
