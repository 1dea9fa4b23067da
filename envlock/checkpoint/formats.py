"""The checkpoint formats envlock reads, one row each: the one place a format is named.

A row says how a file of the format is recognised (by its name, or by its first bytes), the
names a directory's member of it has, how it is read into a `Part`, where its tensors' bytes
lie for `diff --weights` (None: its tensors are listed as not compared), and the MAX_BYTES
key (base/limits.py) its bytes are read under. `inspect` and `diff` (reader.py), the choice
of a directory's checkpoint (choose.py), `--weights` (weights.py) and the help texts read
this table; tests/checkpoint/test_formats.py walks every row.

To add a format: a module that reads it, and a row here (with an example file in the test).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envlock.base.limits import printable
from envlock.base.untrusted import open_untrusted
from envlock.checkpoint.archive import load_raw_pickle, load_torch_zip
from envlock.checkpoint.dcp import METADATA, SHARD_SUFFIX, is_dcp_dir, read_dcp
from envlock.checkpoint.index import INDEX_SUFFIX, Shards, read_index
from envlock.checkpoint.inert import TensorInfo
from envlock.checkpoint.report import FileInfo, Part, one_file
from envlock.checkpoint.safetensors import read_safetensors
from envlock.checkpoint.tensor_bytes import Reader, Span
from envlock.checkpoint.unpickler import LEGACY_MAGIC
from envlock.checkpoint.weights_dcp import dcp_spans
from envlock.checkpoint.weights_files import safetensors_spans, torch_zip_spans
from envlock.errors import OperationError, UsageError

LoadFn = Callable[[Path, bool, Path | None], Part]  # (path, follow_links, within) → Part
SpanFn = Callable[[Reader, str, TensorInfo], list[Span] | None]  # (reader, file, tensor)

# What a member of a checkpoint directory is (choose.py and reader.py decide by it):
WEIGHTS = "weights"  # tensors: a checkpoint alone, one step of several, or an index's shard
INDEX = "index"  # names the weight files that make one checkpoint
EXTRA = "extra"  # read beside weights (accelerate's random_states_N.pkl); alone, no checkpoint
DIRECTORY = "directory"  # a folder that is one checkpoint (DCP's)


@dataclass(frozen=True)
class Format:
    """One checkpoint format: how it is found, read, and where its tensors' bytes lie."""

    name: str  # the report's format, and its files' unless `files` says otherwise
    member: str  # WEIGHTS, INDEX, EXTRA or DIRECTORY
    load: LoadFn  # a path of it, read through the gate into a Part
    limit: str  # the MAX_BYTES key its bytes are read under (base/limits.py)
    suffixes: tuple[str, ...] = ()  # the names a directory's member of it has
    sniff: Callable[[bytes, bytes], bool] | None = None  # (first 16 bytes, last byte)
    named: Callable[[Path], bool] | None = None  # known by its name (or a folder's content)
    spans: SpanFn | None = None  # where a tensor's row-major bytes lie (diff --weights)
    files: tuple[str, ...] = ()  # the FileInfo formats its reader lists (default: its name)
    what: str = ""  # how help texts name it; "" when it is not advertised

    def file_formats(self) -> tuple[str, ...]:
        return self.files or (self.name,)


# --- the readers: each turns one path into a Part ---------------------------------------------


def _read_torch_zip(path: Path, follow_links: bool, within: Path | None) -> Part:
    loaded = load_torch_zip(path, within=within, follow_links=follow_links)
    stubbed = tuple(sorted(loaded.stubbed))
    return Part("torch-zip", loaded.root, one_file(str(path), "torch-zip"), stubbed, loaded.nbytes)


def _read_safetensors(path: Path, follow_links: bool, within: Path | None) -> Part:
    tensors, header_bytes, meta = read_safetensors(path, within=within, follow_links=follow_links)
    files = one_file(str(path), "safetensors")
    return Part("safetensors", tensors, files, (), header_bytes, (), tuple(meta.items()))


def _refuse_legacy(path: Path, follow_links: bool, within: Path | None) -> Part:
    raise UsageError(
        f"{path}: legacy torch.save format (torch < 1.6 or "
        "_use_new_zipfile_serialization=False) is not supported",
        hint="convert it once with a current torch, which runs the file's pickle code "
        "(only for a file you trust): python -c "
        "'import sys, torch; p = sys.argv[1]; "
        f"torch.save(torch.load(p, weights_only=False), p)' {path}",
    )


def _read_pickle(path: Path, follow_links: bool, within: Path | None) -> Part:
    loaded = load_raw_pickle(path, within=within, follow_links=follow_links)
    note = f"{path.name}: a raw pickle, not a torch zip archive (described, not executed)"
    stubbed = tuple(sorted(loaded.stubbed))
    files = one_file(str(path), "pickle")
    return Part("pickle", loaded.root, files, stubbed, loaded.nbytes, (note,))


def _read_index(path: Path, follow_links: bool, within: Path | None) -> Part:
    return read_index(path, follow_links, within, Shards(WEIGHT_SUFFIXES, read_sniffed))


def _read_dcp(path: Path, follow_links: bool, within: Path | None) -> Part:
    """A DCP directory, or its .metadata; one shard alone is refused (only .metadata can
    place its bytes)."""
    if not (is_dcp_dir(path) or path.name == METADATA):
        raise UsageError(
            f"{path}: one shard of a torch.distributed.checkpoint: only the directory's "
            ".metadata says which tensors its bytes belong to",
            hint=f"inspect its directory: envlock inspect {printable(str(path.parent))}",
        )
    directory = path if path.is_dir() else path.parent
    root, shards, notes, allowance = read_dcp(directory, follow_links)
    files: tuple[FileInfo, ...] = (FileInfo(str(directory / METADATA), "dcp-metadata", 0),)
    files += tuple(FileInfo(str(p), "dcp-shard", 0) for p in shards)
    return Part("dcp", root, files, (), allowance, tuple(notes))


def _dcp_spans(reader: Reader, file: str, info: TensorInfo) -> list[Span] | None:
    assert info.storage is not None
    return dcp_spans(reader, file, info.storage.key, info)


# --- how a file is recognised -------------------------------------------------------------------
_PICKLE_0_STARTS = tuple(bytes([c]) for c in b"(}])cNIFLSVX")


def _is_raw_pickle(head: bytes, last: bytes) -> bool:
    # Protocol 2+ starts with PROTO; protocols 0 and 1 start with an opcode that builds a
    # value (a dict as "(dp0" or "}q\x00") and, like every pickle, end with STOP.
    if head[:1] == b"\x80":
        return head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")
    return head[:1] in _PICKLE_0_STARTS and last == b"."


def _is_dcp(path: Path) -> bool:
    return is_dcp_dir(path) or path.name == METADATA or path.name.endswith(SHARD_SUFFIX)


_TORCH = (".pt", ".pth", ".bin", ".ckpt", ".pt.tar", ".pth.tar")

# Sniffed rows are tried in this order (legacy's magic is a pickle: before the raw pickle's);
# named ones too (DCP before the index); help texts list the advertised ones in it.
FORMATS: tuple[Format, ...] = (
    Format(
        "torch-zip", WEIGHTS, _read_torch_zip, "checkpoint", _TORCH,
        sniff=lambda head, _: head.startswith(b"PK\x03\x04"), spans=torch_zip_spans,
        what="a torch.save file (.pt/.pth)",
    ),
    Format(
        "safetensors", WEIGHTS, _read_safetensors, "checkpoint", (".safetensors",),
        sniff=lambda head, _: len(head) > 8 and head[8:9] == b"{", spans=safetensors_spans,
        what="a .safetensors file",
    ),
    Format(
        "dcp", DIRECTORY, _read_dcp, "pickle", named=_is_dcp, spans=_dcp_spans,
        files=("dcp-metadata", "dcp-shard"),
    ),
    Format(
        "index", INDEX, _read_index, "json", (INDEX_SUFFIX,),
        named=lambda p: p.name.endswith(INDEX_SUFFIX), what="a sharded *.index.json",
    ),
    Format(
        "legacy-torch", WEIGHTS, _refuse_legacy, "checkpoint",
        sniff=lambda head, _: head.startswith(LEGACY_MAGIC),
    ),
    Format("pickle", EXTRA, _read_pickle, "pickle", (".pkl",), sniff=_is_raw_pickle),
)  # fmt: skip


def suffixes(*members: str) -> tuple[str, ...]:
    """The names a directory's members of these kinds have, each once, in the table's order."""
    found = (s for m in members for f in FORMATS if f.member == m for s in f.suffixes)
    return tuple(dict.fromkeys(found))


WEIGHT_SUFFIXES = suffixes(WEIGHTS)  # weight files: shards, steps, a checkpoint alone
CHECKPOINT_NAMES = suffixes(WEIGHTS, INDEX)  # what makes a directory hold a checkpoint
MEMBER_SUFFIXES = suffixes(WEIGHTS, INDEX, EXTRA)  # every file a directory's read takes


def advertised() -> tuple[str, ...]:
    """How help texts and hints name the formats a user passes, in the table's order."""
    return tuple(f.what for f in FORMATS if f.what)


def is_checkpoint_dir(path: Path) -> bool:
    """Whether `path` is a folder that is one checkpoint (a DCP directory)."""
    return directory_format(path) is not None


def directory_format(path: Path) -> Format | None:
    if not path.is_dir():
        return None
    return next((f for f in FORMATS if f.member == DIRECTORY and f.named and f.named(path)), None)


def named_format(path: Path) -> Format | None:
    """The format a path's name (or a folder's content) says, before any byte is read."""
    return next((f for f in FORMATS if f.named is not None and f.named(path)), None)


def sniffed(head: bytes, last: bytes) -> Format | None:
    """The format a file's first 16 bytes and its last byte say."""
    return next((f for f in FORMATS if f.sniff is not None and f.sniff(head, last)), None)


def format_of(path: Path, *, follow_links: bool = False) -> Format | None:
    """The format `path` is read as: by its name, else by its bytes (None: no checkpoint)."""
    return named_format(path) or sniffed(*_ends(path, follow_links, None))


def by_file(file_format: str) -> Format | None:
    """The row whose reader lists files of `file_format` (a FileInfo's)."""
    return next((f for f in FORMATS if file_format in f.file_formats()), None)


def read_file(path: Path, follow_links: bool, within: Path | None) -> Part:
    """One file (or a DCP directory); `within`: the directory it was found in, if any."""
    fmt = named_format(path)
    if fmt is not None:
        return fmt.load(path, follow_links, within)
    return read_sniffed(path, follow_links, within)


def read_sniffed(path: Path, follow_links: bool, within: Path | None) -> Part:
    """A file read as what its first bytes say (an index's shard, a directory's member)."""
    head, last = _ends(path, follow_links, within)
    # Each reader opens the file again through the same gate (what it opens is checked again).
    fmt = sniffed(head, last)
    if fmt is not None:
        return fmt.load(path, follow_links, within)
    if path.name.endswith(WEIGHT_SUFFIXES):
        what = "empty" if not head else "neither a torch zip archive nor a safetensors file"
        raise OperationError(f"{path}: {what}: the checkpoint is truncated or corrupt")
    raise UsageError(
        f"{path}: not a checkpoint envlock can read", hint=f"expected {_either(advertised())}"
    )


def _either(names: tuple[str, ...]) -> str:
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _ends(path: Path, follow_links: bool, within: Path | None) -> tuple[bytes, bytes]:
    with open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f:
        head = f.read(16)
        if not head:
            return head, b""
        f.seek(-1, 2)
        return head, bytes(f.read(1))


def spans(reader: Reader, info: TensorInfo) -> list[Span] | None:
    """Where a tensor's bytes lie, as its file's format says; a storage no file is named by
    is a directory format's (DCP names its folder)."""
    assert info.storage is not None
    found = reader.by_name.get(info.storage.file)
    for fmt in FORMATS:
        if not (found.format in fmt.file_formats() if found else fmt.member == DIRECTORY):
            continue
        where = fmt.spans(reader, info.storage.file, info) if fmt.spans else None
        if where is not None:
            return where
    return None
