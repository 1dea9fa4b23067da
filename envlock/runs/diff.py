"""Diff: what changed between two runs, grouped, most consequential first.

A side is a snapshot file, a directory holding one (a checkpoint dir, whose checkpoint's own
config is read too), or a lock. Comparing is pure: `compare(a, b)` over loaded sides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlock import ui
from envlock.checkpoint.dcp import is_dcp_dir
from envlock.checkpoint.limits import MAX_JSON_ENTRIES, Refused
from envlock.checkpoint.reader import CHECKPOINT_SUFFIXES, read_checkpoint_config
from envlock.checkpoint.runfiles import hyperparameters, newest_run_dir, split_run_paths
from envlock.cuda import is_cuda_library
from envlock.errors import EnvlockError, UsageError
from envlock.lock import Lock, parse_lock
from envlock.lock_schema import SHOWN
from envlock.runs.snapshot_file import SNAPSHOT_FILE, load_snapshot, snapshot_lock
from envlock.untrusted import open_untrusted, read_untrusted


@dataclass(frozen=True)
class Side:
    label: str
    lock: Lock | None
    snapshot: dict[str, Any] | None = None
    checkpoint_config: dict[str, Any] | None = None
    # {file: {field: value}} from config.json, training_args.bin, optimizer param_groups, ...
    run_files: dict[str, Any] | None = None
    # {file: {field: path}}: where the run wrote (training_args.bin's output_dir, ...)
    run_paths: dict[str, Any] | None = None

    def packages(self) -> dict[str, str]:
        if self.snapshot is not None:
            return dict(self.snapshot.get("packages") or {})
        return self.lock.versions() if self.lock else {}

    def torch(self) -> dict[str, Any]:
        packages = self.packages()
        found = dict((self.snapshot or {}).get("torch") or {})
        version = found.get("version") or packages.get("torch")
        if not version:
            return {}
        label = version.partition("+")[2] or None
        cuda_libs = sorted(f"{name}=={v}" for name, v in packages.items() if is_cuda_library(name))
        return {
            "torch": version,
            "local label": found.get("local", label),
            "CUDA": found.get("cuda"),
            "cuDNN": found.get("cudnn"),
            "CUDA libraries": ", ".join(cuda_libs) or None,
            "triton": packages.get("triton") or packages.get("pytorch-triton"),
        }

    def scripts(self) -> dict[str, str]:
        if self.snapshot is not None:
            return dict((self.snapshot.get("scripts") or {}).get("sha256") or {})
        return dict((self.lock.meta.get("scripts") if self.lock else None) or {})

    def config(self) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        if self.checkpoint_config:
            merged.update({f"checkpoint.{k}": v for k, v in self.checkpoint_config.items()})
        run_config = (self.snapshot or {}).get("config")
        if run_config is not None:
            merged["run"] = run_config
        flat = flatten(merged)
        for name, fields in (self.run_files or {}).items():
            flat.update({f"{name}: {k}": v for k, v in flatten(fields).items()})
        return flat

    def paths(self) -> dict[str, Any]:
        flat: dict[str, Any] = {}
        for name, fields in (self.run_paths or {}).items():
            flat.update({f"{name}: {k}": v for k, v in flatten(fields).items()})
        return flat

    def cache(self) -> dict[str, Any] | None:
        return (self.snapshot or {}).get("cache")

    def hardware(self) -> dict[str, Any]:
        snap = self.snapshot or {}
        hw = snap.get("hardware") or {}
        gpus = hw.get("gpus") or []
        return {
            "GPUs": ", ".join(f"{g.get('name')} (sm {g.get('capability')})" for g in gpus) or None,
            "driver": hw.get("driver"),
            "python": snap.get("python"),
            "machine": (snap.get("platform") or {}).get("machine"),
            "host": (snap.get("host") or {}).get("hostname"),
        }


@dataclass(frozen=True)
class Change:
    key: str
    a: Any
    b: Any
    only_in: str = ""  # "a" or "b": the key exists on that side only

    @property
    def kind(self) -> str:
        if self.only_in == "b" or (not self.only_in and self.a is None):
            return "added"
        if self.only_in == "a" or (not self.only_in and self.b is None):
            return "removed"
        return "changed"


@dataclass(frozen=True)
class Group:
    name: str
    changes: tuple[Change, ...] = field(default_factory=tuple)
    note: str = ""
    counted: bool = True  # False: shown, but the sides do not differ for it (run paths)

    def bounded(self) -> Group:
        """The group with at most MAX_JSON_ENTRIES changes, the rest counted in its note."""
        if len(self.changes) <= MAX_JSON_ENTRIES:
            return self
        cut = f"{len(self.changes) - MAX_JSON_ENTRIES:,} more changes not shown"
        note = f"{self.note}; {cut}" if self.note else cut
        return Group(self.name, self.changes[:MAX_JSON_ENTRIES], note, self.counted)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "note": self.note,
            "counted": self.counted,
            "changes": [{"key": c.key, "a": c.a, "b": c.b, "kind": c.kind} for c in self.changes],
        }


# -- loading ------------------------------------------------------------------------------
def load_side(path: str, follow_links: bool = False) -> Side:
    """One side of a diff; every file it reads passes the untrusted-bytes gate, and those of a
    directory must lie inside it unless `follow_links`."""
    target = Path(path)
    follow = {"follow_links": follow_links}
    if target.is_dir():
        has_snapshot = os.path.lexists(target / SNAPSHOT_FILE)
        snapshot = load_snapshot(target, **follow) if has_snapshot else None
        config = checkpoint_config(target, follow_links)
        run, paths = run_hyperparameters(target, follow_links)
        if snapshot is None and config is None and run is None and paths is None:
            raise UsageError(
                f"{target}: holds neither {SNAPSHOT_FILE} nor a checkpoint",
                hint="pass a snapshot file, a checkpoint dir or a lock",
            )
        lock = snapshot_lock(snapshot, target) if snapshot is not None else None
        return Side(str(target), lock, snapshot, config, run, paths)
    if not os.path.lexists(target):  # anything else that exists is judged when read
        raise UsageError(f"{target}: no such file or directory")
    if target.name.startswith("pylock.") and target.suffix == ".toml":
        # A lock from elsewhere is data too: validated, read to be shown.
        return Side(str(target), parse_lock(target, read_lock_text(target), SHOWN))
    if target.suffix == ".json":
        snapshot = load_snapshot(target, **follow)
        return Side(str(target), snapshot_lock(snapshot, target), snapshot)
    if target.name.endswith(CHECKPOINT_SUFFIXES):
        # A checkpoint file: its own config, and the snapshot beside it when there is one.
        beside = target.parent / SNAPSHOT_FILE
        has_snapshot = os.path.lexists(beside)
        snapshot = load_snapshot(target.parent, **follow) if has_snapshot else None
        lock = snapshot_lock(snapshot, beside) if snapshot is not None else None
        return Side(str(target), lock, snapshot, read_checkpoint_config(target, **follow))
    raise UsageError(
        f"{target}: not a snapshot, checkpoint or lock",
        hint="pass envlock-snapshot.json, a checkpoint file or dir, or pylock.<name>.toml",
    )


def read_lock_text(path: Path) -> str:
    try:
        return read_untrusted(path, "lock").decode()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from None


def checkpoint_config(directory: Path, follow_links: bool = False) -> dict[str, Any] | None:
    """The config the newest checkpoint in `directory` carries (read without torch, never
    executed). Keyed by entry name only, so runs whose files are named by step compare.
    A checkpoint that is not one is passed over; one refused (a FIFO, a link out, past a
    limit or the command's budget) ends the diff."""
    candidates = [p for p in directory.iterdir() if p.name.endswith(CHECKPOINT_SUFFIXES)]
    for path in sorted(candidates, key=_mtime, reverse=True):
        if path.is_dir() and not is_dcp_dir(path):  # a directory under a file's name
            open_untrusted(path, "checkpoint").close()  # refuses it, saying what it is
        try:
            config = read_checkpoint_config(path, follow_links=follow_links)
        except Refused:
            raise
        except EnvlockError:
            continue
        if config:
            return config  # its secrets redacted by the reader (summary.config)
    return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # a dangling link: read (and refused) last
        return 0.0


def run_hyperparameters(
    directory: Path, follow_links: bool = False
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """config.json, training_args.bin, optimizer param_groups, ... of `directory` or of its
    newest checkpoint-N/ (read without torch, never executed), and apart from them the paths
    the run wrote to (output_dir, ...); None for either it has none of."""
    run_dir = newest_run_dir(directory)
    if run_dir is None:
        return None, None
    found = hyperparameters(run_dir, follow_links)  # its secrets redacted by the reader
    settings, paths = split_run_paths(found)
    return settings or None, paths or None


# -- comparing ----------------------------------------------------------------------------
def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key == "__class__":
                continue
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def mapping_changes(
    a: dict[str, Any], b: dict[str, Any], *, ordered: bool = False
) -> tuple[Change, ...]:
    """What differs between two flat mappings: changed values, and keys one side lacks
    (a key on one side only is a difference even when its value is null)."""
    keys = list(dict.fromkeys([*a, *b])) if ordered else sorted(set(a) | set(b))
    return tuple(key_change(k, a, b) for k in keys if k not in a or k not in b or a[k] != b[k])


def key_change(key: str, a: dict[str, Any], b: dict[str, Any]) -> Change:
    only_in = "b" if key not in a else "a" if key not in b else ""
    return Change(key, a.get(key), b.get(key), only_in)


def known_to_both(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict, dict]:
    """Drop what one side cannot know (a lock has no observed CUDA or cuDNN)."""
    keys = {k for k in a if a[k] is not None} & {k for k in b if b[k] is not None}
    keys |= {k for k in ("torch",) if k in a or k in b}
    return {k: v for k, v in a.items() if k in keys}, {k: v for k, v in b.items() if k in keys}


def warmth(cache: dict[str, Any] | None) -> str | None:
    if not cache:
        return None
    if not cache.get("exists") or not cache.get("files"):
        return "cold"
    return f"warm ({ui.size(cache.get('bytes') or 0)})"


def cache_group(a: Side, b: Side, *, torch_changed: bool) -> Group:
    ca, cb = a.cache() or {}, b.cache() or {}
    changes = []
    fa = (ca.get("fingerprint") or {}).get("id")
    fb = (cb.get("fingerprint") or {}).get("id")
    if fa != fb and not torch_changed:  # a new torch build implies a new fingerprint
        changes.append(Change("fingerprint", fa, fb))
    wa, wb = warmth(ca), warmth(cb)
    if wa != wb:
        changes.append(Change("compile cache", wa, wb))
    return Group("compile cache", tuple(changes))


def compare(a: Side, b: Side) -> list[Group]:
    """Grouped differences, most consequential first; empty groups dropped."""
    torch_a, torch_b = a.torch(), b.torch()
    if a.snapshot is None or b.snapshot is None:
        torch_a, torch_b = known_to_both(torch_a, torch_b)
    # torch and its nvidia-*-cuXX libraries are reported together, as the torch build.
    pkgs_a = {k: v for k, v in a.packages().items() if k != "torch" and not is_cuda_library(k)}
    pkgs_b = {k: v for k, v in b.packages().items() if k != "torch" and not is_cuda_library(k)}
    groups = [
        Group("torch build", mapping_changes(torch_a, torch_b, ordered=True)),
        Group("packages", mapping_changes(pkgs_a, pkgs_b)),
        Group("scripts", mapping_changes(short(a.scripts()), short(b.scripts()))),
    ]
    if a.config() and b.config():  # a lock, or a run that passed none, has no config
        groups.append(Group("hyperparameters", mapping_changes(a.config(), b.config())))
    if a.paths() and b.paths():
        # Every two runs write to different places: shown, never a difference by itself.
        changes = mapping_changes(a.paths(), b.paths())
        groups.append(Group("run paths", changes, RUN_PATHS_NOTE, counted=False))
    if a.snapshot is not None and b.snapshot is not None:
        # Observed facts exist only in snapshots; a lock side has none to compare.
        groups += [
            Group("environment variables", mapping_changes(env_of(a), env_of(b))),
            cache_group(a, b, torch_changed=torch_a != torch_b),
            Group("hardware and driver", mapping_changes(a.hardware(), b.hardware())),
        ]
    # What the runs measured (first) and read: diff_data.py, which imports this module.
    from envlock.runs.diff_data import with_metrics_and_data

    return [g for g in with_metrics_and_data(a, b, groups) if g.changes]


RUN_PATHS_NOTE = "where each run wrote its files, not how it trained: not counted"


# Set by envlock run from the build fingerprint: reported under "compile cache" instead.
MANAGED_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def env_of(side: Side) -> dict[str, Any]:
    env = dict((side.snapshot or {}).get("env") or {})
    return {k: v for k, v in env.items() if k not in MANAGED_ENV}


def short(hashes: dict[str, str]) -> dict[str, str]:
    return {k: v[:12] for k, v in hashes.items()}
