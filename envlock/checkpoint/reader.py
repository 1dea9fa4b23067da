"""Inspect checkpoints without torch: keys, shapes, dtypes, parameter counts, bytes and config.

Readers turn a torch zip (archive.py), a safetensors file, a sharded `*.index.json` or a
directory of them into one inert object tree, a `CheckpointReport` that lists its tensors;
`summary` builds the `--json` document and the run's config from it.
Only pickles and headers are read, so time and memory do not grow with tensor bytes, and every
read is bounded (limits.py). A directory's reads stay inside it: a symlinked member or an index
naming `../shard` is skipped or refused unless `follow_links` is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envlock.base.limits import command_budget, printable, printable_errors, shown
from envlock.base.untrusted import FOLLOW_HINT, Unsafe, open_untrusted
from envlock.checkpoint import summary
from envlock.checkpoint.archive import load_raw_pickle, load_torch_zip
from envlock.checkpoint.choose import choose_checkpoint
from envlock.checkpoint.dcp import METADATA, SHARD_SUFFIX, by_first_name, is_dcp_dir, read_dcp
from envlock.checkpoint.jsondata import read_json
from envlock.checkpoint.kinds import section_kinds
from envlock.checkpoint.report import CheckpointReport, FileInfo
from envlock.checkpoint.safetensors import read_safetensors
from envlock.checkpoint.unpickler import LEGACY_MAGIC
from envlock.errors import OperationError, UsageError

_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pt.tar", ".pth.tar")
CHECKPOINT_SUFFIXES = (*_TORCH_SUFFIXES, ".safetensors")
_DIR_PICKLES = (".pkl",)  # accelerate's random_states_N.pkl, custom_checkpoint_N.pkl
_DIR_JSON = ("config.json", "trainer_state.json")
_PICKLE_0_STARTS = tuple(bytes([c]) for c in b"(}])cNIFLSVX")


def inspect_checkpoint(path: str | Path, *, follow_links: bool = False) -> CheckpointReport:
    """Read a checkpoint file, a sharded index or a directory of them, without torch."""
    path = Path(path)
    with printable_errors(path), command_budget("inspect"):
        if is_dcp_dir(path):
            part = _read_dcp(path, follow_links)
            return CheckpointReport(
                str(path), part.format, _sized(part.files), by_first_name(part.root),
                part.stubbed, part.notes, part.allowance,
            )  # fmt: skip
        if path.is_dir():
            choice = choose_checkpoint(path)
            if choice is not None and choice.path != path:
                chosen = inspect_checkpoint(choice.path, follow_links=follow_links)
                return replace(chosen, notes=(f"read {choice.describe()}", *chosen.notes))
            return _read_dir(path, follow_links)
        if not os.path.lexists(path):
            raise UsageError(f"{path}: no such file or directory", hint="pass a checkpoint path")
        part = _read_file(path, follow_links, None)
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
        if path.is_file() and not follow_links and not _inside(path, path.parent):
            raise Unsafe(f"{path} is a link out of its directory", FOLLOW_HINT)
        report = inspect_checkpoint(path, follow_links=follow_links)
    return summary.config(report.root, report.format == "directory")


@dataclass(frozen=True)
class _Part:
    """What one file (or an index and its shards) holds."""

    format: str
    root: Any
    files: tuple[FileInfo, ...]
    stubbed: tuple[str, ...] = ()
    allowance: int = 0  # bytes of pickle or JSON read: what the walk may spend (tree.py)
    notes: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()  # a safetensors file's __metadata__


def _sized(files: tuple[FileInfo, ...]) -> tuple[FileInfo, ...]:
    return tuple(FileInfo(f.path, f.format, Path(f.path).stat().st_size) for f in files)


def _inside(path: Path, directory: Path) -> bool:
    return path.resolve().is_relative_to(directory.resolve())


def _read_file(path: Path, follow_links: bool, within: Path | None) -> _Part:
    """One file (or a DCP directory); `within`: the directory it was found in, if any."""
    if is_dcp_dir(path) or path.name == METADATA:
        return _read_dcp(path if path.is_dir() else path.parent, follow_links)
    if path.name.endswith(SHARD_SUFFIX):
        raise UsageError(
            f"{path}: one shard of a torch.distributed.checkpoint: only the directory's "
            ".metadata says which tensors its bytes belong to",
            hint=f"inspect its directory: envlock inspect {printable(str(path.parent))}",
        )
    if path.name.endswith(".index.json"):
        return _read_index(path, follow_links, within)
    return _read_tensor_file(path, follow_links, within)


def _read_tensor_file(path: Path, follow_links: bool, within: Path | None) -> _Part:
    with open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f:
        head = f.read(16)
        last = _last_byte(f) if head else b""
    # Each loader opens the file again through the same gate (what it opens is checked again).
    if head.startswith(b"PK\x03\x04"):
        loaded = load_torch_zip(path, within=within, follow_links=follow_links)
        stubbed = tuple(sorted(loaded.stubbed))
        return _Part("torch-zip", loaded.root, _one(path, "torch-zip"), stubbed, loaded.nbytes)
    if len(head) > 8 and head[8:9] == b"{":
        tensors, header_bytes, meta = read_safetensors(
            path, within=within, follow_links=follow_links
        )
        part = _Part("safetensors", tensors, _one(path, "safetensors"), (), header_bytes)
        return replace(part, metadata=tuple(meta.items()))
    if head.startswith(LEGACY_MAGIC):
        raise UsageError(
            f"{path}: legacy torch.save format (torch < 1.6 or "
            "_use_new_zipfile_serialization=False) is not supported",
            hint="convert it once with a current torch, which runs the file's pickle code "
            "(only for a file you trust): python -c "
            "'import sys, torch; p = sys.argv[1]; "
            f"torch.save(torch.load(p, weights_only=False), p)' {path}",
        )
    if _is_raw_pickle(head, last):
        loaded = load_raw_pickle(path, within=within, follow_links=follow_links)
        note = f"{path.name}: a raw pickle, not a torch zip archive (described, not executed)"
        stubbed = tuple(sorted(loaded.stubbed))
        return _Part("pickle", loaded.root, _one(path, "pickle"), stubbed, loaded.nbytes, (note,))
    if path.name.endswith(CHECKPOINT_SUFFIXES):
        what = "empty" if not head else "neither a torch zip archive nor a safetensors file"
        raise OperationError(f"{path}: {what}: the checkpoint is truncated or corrupt")
    raise UsageError(
        f"{path}: not a checkpoint envlock can read",
        hint="expected a torch.save file (.pt/.pth), a .safetensors file or *.index.json",
    )


def _last_byte(f: Any) -> bytes:
    f.seek(-1, 2)
    return bytes(f.read(1))


def _is_raw_pickle(head: bytes, last: bytes) -> bool:
    # Protocol 2+ starts with PROTO; protocols 0 and 1 start with an opcode that builds a
    # value (a dict as "(dp0" or "}q\x00") and, like every pickle, end with STOP.
    if head[:1] == b"\x80":
        return head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")
    return head[:1] in _PICKLE_0_STARTS and last == b"."


def _read_dcp(directory: Path, follow_links: bool) -> _Part:
    root, shards, notes, allowance = read_dcp(directory, follow_links)
    files: tuple[FileInfo, ...] = (FileInfo(str(directory / METADATA), "dcp-metadata", 0),)
    files += tuple(FileInfo(str(p), "dcp-shard", 0) for p in shards)
    return _Part("dcp", root, files, (), allowance, tuple(notes))


def _one(path: Path, fmt: str) -> tuple[FileInfo, ...]:
    return (FileInfo(str(path), fmt, 0),)


# --- sharded indexes ----------------------------------------------------------------------------


def _weight_map(index: Path, follow_links: bool = False, within: Path | None = None) -> dict:
    document = read_json(index, "checkpoint index", within=within, follow_links=follow_links)
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(s, str) and s and "\0" not in s for s in weight_map.values()
    ):
        raise OperationError(f"{index}: not a valid checkpoint index (no weight_map of names)")
    return weight_map


def _shard_path(index: Path, shard: str, follow_links: bool) -> Path:
    path = index.parent / shard
    if not follow_links and not _inside(path, index.parent):
        raise OperationError(
            f"{index}: refusing shard {shown(shard)}: it lies outside the index's directory",
            hint=FOLLOW_HINT,
        )
    if not path.name.endswith(CHECKPOINT_SUFFIXES):  # never another index: no loops
        raise OperationError(f"{index}: shard {shown(shard)} is not a .safetensors or torch file")
    return path


def _read_index(path: Path, follow_links: bool, within: Path | None) -> _Part:
    weight_map = _weight_map(path, follow_links, within)
    tensors: dict[str, Any] = {}
    shards: list[FileInfo] = []
    stubbed: set[str] = set()
    allowance, read = path.stat().st_size, set()
    metadata: tuple[tuple[str, str], ...] = ()
    for shard in dict.fromkeys(weight_map.values()):
        shard_path = _shard_path(path, shard, follow_links)
        if not os.path.lexists(shard_path):
            raise OperationError(
                f"{path}: shard {printable(shard)} is listed but missing: incomplete copy"
            )
        if shard_path.resolve() in read:  # one file under two spellings is read once
            continue
        read.add(shard_path.resolve())
        part = _read_tensor_file(shard_path, follow_links, path.parent)
        if not isinstance(part.root, dict):
            raise OperationError(f"{shard_path}: a shard must hold a flat state dict")
        shards.append(part.files[0])
        metadata = metadata or part.metadata  # each shard repeats it (save_pretrained)
        tensors.update(part.root)
        stubbed.update(part.stubbed)
        allowance += part.allowance
    missing = [k for k in weight_map if k not in tensors]
    if missing:
        example = shown(missing[0], 100)
        raise OperationError(f"{path}: {len(missing)} indexed tensors (e.g. {example}) absent")
    fmt = f"{shards[0].format}-index" if shards else "index"
    files = (FileInfo(str(path), "index", 0), *shards)
    return _Part(fmt, tensors, files, tuple(sorted(stubbed)), allowance, (), metadata)


# --- directories --------------------------------------------------------------------------------


def _dir_members(path: Path, follow_links: bool) -> tuple[list[Path], list[Path], list[str]]:
    """Checkpoint files and JSON extras in `path`, and notes on the links left unread."""
    notes: list[str] = []
    wanted = []
    for child in sorted(path.iterdir()):
        name = child.name
        if is_dcp_dir(child) and not child.is_symlink():  # accelerate's pytorch_model_fsdp_0/
            wanted.append(child)
            continue
        suffixes = (".index.json", *CHECKPOINT_SUFFIXES, *_DIR_PICKLES)
        if not (name.endswith(suffixes) or name in _DIR_JSON):
            continue
        if not follow_links and not _inside(child, path):
            target = child.resolve()
            notes.append(f"skipped {name}: a link to {target}, outside {path} ({FOLLOW_HINT})")
        else:  # a FIFO, device or directory under such a name is refused when it is read
            wanted.append(child)
    indexes = [p for p in wanted if p.name.endswith(".index.json")]
    taken = {(i.parent / s).resolve() for i in indexes for s in _shard_names(i)}
    ckpts = [
        p
        for p in wanted
        if p not in indexes
        and p.resolve() not in taken
        and (p.is_dir() or p.name.endswith((*CHECKPOINT_SUFFIXES, *_DIR_PICKLES)))
    ]
    extras = [p for p in wanted if p.name in _DIR_JSON]
    return [*indexes, *ckpts], extras, notes


def _shard_names(index: Path) -> list[str]:
    try:
        return list(dict.fromkeys(_weight_map(index).values()))
    except OperationError:
        return []  # reported when the index itself is read


def _read_dir(path: Path, follow_links: bool) -> CheckpointReport:
    members, extras, notes = _dir_members(path, follow_links)
    if not members:
        raise UsageError(
            f"{path}: no checkpoint files here (.pt, .pth, .bin, .ckpt, .safetensors, index)",
            hint="; ".join(notes) or None,  # the links out it skipped, and the option to read them
        )
    root: dict[str, Any] = {}
    files: list[FileInfo] = []
    stubbed: set[str] = set()
    allowance = 0
    metadata: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for member in members:
        try:
            part = _read_file(member, follow_links, path)
        except UsageError as exc:  # e.g. a .bin that is no torch file: note it, go on
            notes.append(f"skipped {member.name}: {exc.message}")
            continue
        root[member.name] = part.root
        if part.metadata:
            metadata.append((member.name, part.metadata))
        files += part.files
        stubbed.update(part.stubbed)
        notes += part.notes
        allowance += part.allowance
    for extra in extras:
        try:
            root[extra.name] = read_json(extra, "JSON file", within=path, follow_links=follow_links)
        except OperationError as exc:
            notes.append(f"skipped {extra.name}: {exc.message}")
            continue
        files.append(FileInfo(str(extra), "json", 0))
        allowance += extra.stat().st_size
    kinds = section_kinds(root)
    for name, kind in kinds.items():
        if kind.startswith("duplicate:"):
            notes.append(
                f"{name} holds the same weights as {kind.partition(':')[2]} (same keys, dtypes "
                "and shapes): its tensors are listed, its parameters not counted again"
            )
    return CheckpointReport(
        str(path), "directory", _sized(tuple(files)), root, tuple(sorted(stubbed)),
        tuple(notes), allowance, tuple(kinds.items()), tuple(metadata),
    )  # fmt: skip
