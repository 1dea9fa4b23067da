"""Inspect checkpoints without torch: keys, shapes, dtypes, parameter counts, bytes and config.

Each format's reader (formats.py: a torch zip, a safetensors file, a sharded `*.index.json`,
a DCP directory, a raw pickle) and the directory of them read here give one inert object
tree, a `CheckpointReport` that lists its tensors;
`summary` builds the `--json` document and the run's config from it.
Only pickles and headers are read, so time and memory do not grow with tensor bytes, and every
read is bounded (limits.py). A directory's reads stay inside it: a symlinked member or an index
naming `../shard` is skipped or refused unless `follow_links` is given.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from envlock.base.limits import command_budget, printable_errors
from envlock.base.untrusted import FOLLOW_HINT, Unsafe
from envlock.checkpoint import formats, summary
from envlock.checkpoint.choose import choose_checkpoint
from envlock.checkpoint.dcp import by_first_name
from envlock.checkpoint.formats import INDEX_SUFFIX, MEMBER_SUFFIXES, is_checkpoint_dir, read_file
from envlock.checkpoint.index import inside, shard_names
from envlock.checkpoint.jsondata import read_json
from envlock.checkpoint.kinds import section_kinds
from envlock.checkpoint.report import CheckpointReport, FileInfo, Part
from envlock.errors import OperationError, UsageError

_DIR_JSON = ("config.json", "trainer_state.json")


def inspect_checkpoint(path: str | Path, *, follow_links: bool = False) -> CheckpointReport:
    """Read a checkpoint file, a sharded index or a directory of them, without torch."""
    path = Path(path)
    with printable_errors(path), command_budget("inspect"):
        folder = formats.directory_format(path)
        if folder is not None:  # its keys are fully-qualified names: shown by their first
            part = folder.load(path, follow_links, None)
            return CheckpointReport(
                str(path), part.format, _sized(part.files), by_first_name(part.root),
                part.stubbed, part.notes, part.allowance,
            )  # fmt: skip
        if path.is_dir():
            choice = choose_checkpoint(path)
            if choice is not None and choice.path != path:
                # The rule diff follows (runs/describe.py): what a directory's choice reads
                # lies inside it, unless links are to be followed.
                if not follow_links and not inside(choice.path, path):
                    raise Unsafe(f"{choice.path} is a link out of {path}", FOLLOW_HINT)
                chosen = inspect_checkpoint(choice.path, follow_links=follow_links)
                return replace(chosen, notes=(f"read {choice.describe()}", *chosen.notes))
            return _read_dir(path, follow_links)
        if not os.path.lexists(path):
            raise UsageError(f"{path}: no such file or directory", hint="pass a checkpoint path")
        part = read_file(path, follow_links, None)
        return CheckpointReport(
            str(path), part.format, _sized(part.files), part.root, part.stubbed, part.notes,
            part.allowance, metadata=((path.name, part.metadata),) if part.metadata else (),
        )  # fmt: skip


def read_checkpoint_config(
    path: str | Path, *, follow_links: bool = False
) -> dict[str, Any] | None:
    """The run's config/args/hparams as `{entry name: plain JSON-able value}`, or None.

    A file is read as a member of its directory: a symlink leading out of it is refused.
    """
    path = Path(path)
    with printable_errors(path):
        if path.is_dir() and not _dir_members(path, follow_links)[0]:
            return None
        if path.is_file() and not follow_links and not inside(path, path.parent):
            raise Unsafe(f"{path} is a link out of its directory", FOLLOW_HINT)
        report = inspect_checkpoint(path, follow_links=follow_links)
    return summary.config(report.root, report.format == "directory")


def _sized(files: tuple[FileInfo, ...]) -> tuple[FileInfo, ...]:
    return tuple(FileInfo(f.path, f.format, Path(f.path).stat().st_size) for f in files)


# --- directories --------------------------------------------------------------------------------


def _dir_members(path: Path, follow_links: bool) -> tuple[list[Path], list[Path], list[str]]:
    """Checkpoint files and JSON extras in `path`, and notes on the links left unread."""
    notes: list[str] = []
    wanted = []
    for child in sorted(path.iterdir()):
        name = child.name
        if is_checkpoint_dir(child) and not child.is_symlink():  # pytorch_model_fsdp_0/
            wanted.append(child)
            continue
        if not (name.endswith(MEMBER_SUFFIXES) or name in _DIR_JSON):
            continue
        if not follow_links and not inside(child, path):
            target = child.resolve()
            notes.append(f"skipped {name}: a link to {target}, outside {path} ({FOLLOW_HINT})")
        else:  # a FIFO, device or directory under such a name is refused when it is read
            wanted.append(child)
    indexes = [p for p in wanted if p.name.endswith(INDEX_SUFFIX)]
    taken = {(i.parent / s).resolve() for i in indexes for s in shard_names(i)}
    ckpts = [
        p
        for p in wanted
        if p not in indexes
        and p.resolve() not in taken
        and (p.is_dir() or p.name.endswith(MEMBER_SUFFIXES))
    ]
    extras = [p for p in wanted if p.name in _DIR_JSON]
    return [*indexes, *ckpts], extras, notes


class _Gathered:
    """A directory's members read so far, as one report's parts."""

    def __init__(self, notes: list[str]) -> None:
        self.root: dict[str, Any] = {}
        self.files: list[FileInfo] = []
        self.stubbed: set[str] = set()
        self.allowance = 0
        self.metadata: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self.notes = notes

    def add(self, name: str, part: Part) -> None:
        self.root[name] = part.root
        if part.metadata:
            self.metadata.append((name, part.metadata))
        self.files += part.files
        self.stubbed.update(part.stubbed)
        self.notes += part.notes
        self.allowance += part.allowance

    def add_json(self, extra: Path, directory: Path, follow_links: bool) -> None:
        try:
            value = read_json(extra, "JSON file", within=directory, follow_links=follow_links)
        except OperationError as exc:
            self.notes.append(f"skipped {extra.name}: {exc.message}")
            return
        self.root[extra.name] = value
        self.files.append(FileInfo(str(extra), "json", 0))
        self.allowance += extra.stat().st_size


def _read_dir(path: Path, follow_links: bool) -> CheckpointReport:
    members, extras, notes = _dir_members(path, follow_links)
    if not members:
        raise UsageError(
            f"{path}: no checkpoint files here ({', '.join(MEMBER_SUFFIXES)})",
            hint="; ".join(notes) or None,  # the links out it skipped, and the option to read them
        )
    gathered = _Gathered(notes)
    for member in members:
        try:
            part = read_file(member, follow_links, path)
        except UsageError as exc:  # e.g. a .bin that is no torch file: note it, go on
            notes.append(f"skipped {member.name}: {exc.message}")
            continue
        gathered.add(member.name, part)
    for extra in extras:
        gathered.add_json(extra, path, follow_links)
    kinds = section_kinds(gathered.root)
    notes += _duplicate_notes(kinds)
    return CheckpointReport(
        str(path), "directory", _sized(tuple(gathered.files)), gathered.root,
        tuple(sorted(gathered.stubbed)), tuple(notes), gathered.allowance, tuple(kinds.items()),
        tuple(gathered.metadata),
    )  # fmt: skip


def _duplicate_notes(kinds: dict[str, str]) -> list[str]:
    return [
        f"{name} holds the same weights as {kind.partition(':')[2]} (same keys, dtypes "
        "and shapes): its tensors are listed, its parameters not counted again"
        for name, kind in kinds.items()
        if kind.startswith("duplicate:")
    ]
