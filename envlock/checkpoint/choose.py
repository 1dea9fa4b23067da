"""Which checkpoint a directory means: the one `inspect` and `diff` both read.

A training directory is either one checkpoint (a `save_pretrained` folder, a Trainer's
`checkpoint-N/`, an accelerate `save_state`, a DCP directory) or a place that keeps several
(`step10.pt`, `step20.pt`; a Trainer `output_dir` of `checkpoint-N/` folders). Of several,
the newest is chosen by the step number in its name, then by mtime, and named: a comparison
of two runs must say which files it compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from envlock.checkpoint.formats import (
    CHECKPOINT_NAMES,
    MEMBER_SUFFIXES,
    WEIGHT_SUFFIXES,
    is_checkpoint_dir,
)
from envlock.checkpoint.runfiles import is_run_file

_DIGITS = re.compile(r"\d+")
_STEP_WORDS = re.compile(r"step|iter|epoch|ckpt|checkpoint", re.IGNORECASE)


@dataclass(frozen=True)
class Choice:
    """What is read for a directory: itself, one of its files, or one of its subfolders."""

    path: Path
    candidates: tuple[Path, ...] = ()  # the alternatives it was chosen among, newest first

    def describe(self) -> str:
        """Which checkpoint, and why it (for people: a diff names what it compared)."""
        if len(self.candidates) < 2:
            return str(self.path)
        others = ", ".join(p.name for p in self.candidates[1:4])
        more = f", … {len(self.candidates) - 4} more" if len(self.candidates) > 4 else ""
        return (
            f"{self.path} (the newest of {len(self.candidates)} by step number, then mtime; "
            f"not {others}{more})"
        )


def step_of(name: str) -> int:
    """The step a name carries (its last number: `checkpoint-1500`, `step_20.pt`), or -1."""
    digits = _DIGITS.findall(name)
    return int(digits[-1]) if digits and len(digits[-1]) < 20 else -1


def newest_first(paths: list[Path]) -> tuple[Path, ...]:
    return tuple(sorted(paths, key=lambda p: (step_of(p.name), _mtime(p), p.name), reverse=True))


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:  # a dangling link: last, and refused when read
        return 0.0


def _is_weights(path: Path) -> bool:
    return path.name.endswith(WEIGHT_SUFFIXES) and not is_run_file(path.name)


def alternatives(directory: Path) -> list[Path]:
    """Weight files of `directory` named alike but for their step (`step10.pt`,
    `step20.pt`): alternatives, not parts of one checkpoint. An index's shards never are
    (`model-00001-of-00002`: the last number, their step, is the same)."""
    groups: dict[str, list[Path]] = {}
    for child in directory.iterdir():
        if _is_weights(child):
            groups.setdefault(_DIGITS.sub("#", child.name), []).append(child)
    found: list[Path] = []
    for pattern, group in groups.items():
        steps = sorted({step_of(p.name) for p in group})
        # part0, part1, part2 (or accelerate's model_0, model_1) are numbered parts of one
        # checkpoint; step10/step20, ckpt_1/ckpt_2 and model_1000/model_2000 are steps.
        numbered_parts = steps in (list(range(len(steps))), list(range(1, len(steps) + 1)))
        if len(steps) > 1 and (_STEP_WORDS.search(pattern) or not numbered_parts):
            found += group
    return found


def _is_member(child: Path) -> bool:
    """A part of a checkpoint other than a run file: weights, an index, a pickle, DCP."""
    if is_run_file(child.name):
        return False
    if child.name.endswith(MEMBER_SUFFIXES):
        return True
    return is_checkpoint_dir(child) and not child.is_symlink()


def has_members(directory: Path) -> bool:
    """Whether `directory` holds more than run files: something `inspect` reads as weights."""
    return is_checkpoint_dir(directory) or any(_is_member(c) for c in directory.iterdir())


def holds_checkpoint(directory: Path) -> bool:
    """Whether `directory` itself holds checkpoint files, run files or DCP folders."""
    return any(
        child.name.endswith(CHECKPOINT_NAMES)
        or is_run_file(child.name)
        or (is_checkpoint_dir(child) and not child.is_symlink())
        for child in directory.iterdir()
    )


def choose_checkpoint(directory: Path, *, single: bool = False) -> Choice | None:
    """The checkpoint `directory` means, or None when it holds none (a snapshot alone).

    `single`: a directory whose one checkpoint member is a file means that file (diff reads
    it alone, so `step10.pt` compares with another run's `step20.pt`)."""
    if is_checkpoint_dir(directory):
        return Choice(directory)
    if holds_checkpoint(directory):
        several = alternatives(directory)
        if several:
            ordered = newest_first(several)
            return Choice(ordered[0], ordered)
        members = [c for c in directory.iterdir() if _is_member(c)]
        if single and len(members) == 1 and _is_weights(members[0]) and not members[0].is_dir():
            # One file among run files (`step10.pt` beside a snapshot): read as itself, so
            # its keys compare with another run's `step20.pt`.
            return Choice(members[0])
        return Choice(directory)
    subdirs = [
        p
        for p in directory.iterdir()
        if p.is_dir() and not p.is_symlink() and (is_checkpoint_dir(p) or holds_checkpoint(p))
    ]
    if not subdirs:
        found = lightning_checkpoints(directory)
        return choose_checkpoint(found, single=single) if found is not None else None
    ordered = newest_first(subdirs)
    inner = choose_checkpoint(ordered[0]) if not is_checkpoint_dir(ordered[0]) else None
    if inner is not None and inner.path != ordered[0]:  # checkpoint-N/ keeping step files
        return Choice(inner.path, inner.candidates)
    return Choice(ordered[0], ordered)


def lightning_checkpoints(directory: Path) -> Path | None:
    """A Lightning Trainer's `default_root_dir` (or its `lightning_logs/`): the newest
    `version_N/checkpoints/` folder holding a checkpoint, or None."""
    logs = directory / "lightning_logs"
    if not logs.is_dir() or logs.is_symlink():
        logs = directory
    versions = [
        v / "checkpoints"
        for v in logs.glob("version_*")
        if not v.is_symlink()
        and (v / "checkpoints").is_dir()
        and not (v / "checkpoints").is_symlink()
        and holds_checkpoint(v / "checkpoints")
    ]
    return max(versions, key=lambda c: step_of(c.parent.name), default=None)
