"""Every row of checkpoint/formats.py walked through what reads it: a small file of the
format (hand-assembled, no torch) is sniffed as its row, inspected, found by `choose` in
its directory, compared by `diff`, hashed by `--weights` where its row has spans, and
refused past the MAX_BYTES key its row names. A row without an example here fails."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from envlock.base.limits import MAX_BYTES, Refused, command_budget
from envlock.checkpoint import formats
from envlock.checkpoint.choose import choose_checkpoint, has_members
from envlock.checkpoint.formats import FORMATS, INDEX, Format
from envlock.checkpoint.reader import inspect_checkpoint
from envlock.checkpoint.report import CheckpointReport
from envlock.checkpoint.unpickler import LEGACY_MAGIC
from envlock.checkpoint.weights import digests
from envlock.commands.diff import diff_of
from envlock.commands.inspect import inspect_of
from envlock.errors import OperationError, UsageError
from tests.hostile_checkpoints.assemble import (
    PROTO,
    ST_SPEC,
    glob,
    num,
    safetensors,
    state_dict,
    tensor,
    uni,
    zipped,
)

DCP = "torch.distributed.checkpoint."


@dataclass(frozen=True)
class Example:
    """How to write a file of a format in a folder (the path to read), and whether its
    row's reader refuses it (a format recognised only to be refused with a way out)."""

    write: Callable[[Path], Path]
    refused: bool = False


def torch_zip(folder: Path) -> Path:
    return zipped(folder / "model.pt", PROTO + state_dict({"w": tensor()}) + b".")


def safetensors_file(folder: Path) -> Path:
    return safetensors(folder / "model.safetensors", ST_SPEC, b"\1" * 16)


def index(folder: Path) -> Path:
    shard = "model-00001-of-00001.safetensors"
    safetensors(folder / shard, ST_SPEC, b"\2" * 16)
    path = folder / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": {"w": shard}}))
    return path


def _obj(module: str, name: str, items: dict[str, bytes]) -> bytes:
    """`module.name` made by NEWOBJ, then BUILD with a dict of fields (a dataclass's)."""
    body = b"}(" + b"".join(uni(k) + v for k, v in items.items()) + b"u"
    return glob(module, name) + b")\x81" + body + b"b"


def _size(*dims: int) -> bytes:
    return glob("torch", "Size") + b"((" + b"".join(num(d) for d in dims) + b"ttR"


def dcp(folder: Path) -> Path:
    """A DCP directory of one float32 tensor `w` [4]: one chunk, a torch.save blob at the
    start of the one shard, placed by .metadata's storage_data."""
    directory = folder / "step-100"
    directory.mkdir()
    blob = zipped(folder / "blob.zip", PROTO + tensor() + b".").read_bytes()
    (folder / "blob.zip").unlink()
    (directory / "__0_0.distcp").write_bytes(blob)
    chunk = _obj(DCP + "metadata", "ChunkStorageMetadata", {"offsets": _size(0), "sizes": _size(4)})
    props = _obj(DCP + "metadata", "TensorProperties", {"dtype": glob("torch", "float32")})
    meta = _obj(
        DCP + "metadata",
        "TensorStorageMetadata",
        {"properties": props, "size": _size(4), "chunks": b"](" + chunk + b"e"},
    )
    where = _obj(DCP + "metadata", "MetadataIndex", {"fqn": uni("w"), "offset": _size(0)})
    place = _obj(
        DCP + "filesystem",
        "_StorageInfo",
        {"relative_path": uni("__0_0.distcp"), "offset": num(0), "length": num(len(blob))},
    )
    body = {
        "state_dict_metadata": b"}(" + uni("w") + meta + b"u",
        "storage_data": b"}(" + where + place + b"u",
    }
    (directory / ".metadata").write_bytes(PROTO + _obj(DCP + "metadata", "Metadata", body) + b".")
    return directory


def legacy(folder: Path) -> Path:
    path = folder / "old.pt"
    path.write_bytes(LEGACY_MAGIC + b".")
    return path


def raw_pickle(folder: Path) -> Path:
    path = folder / "random_states_0.pkl"
    path.write_bytes(PROTO + state_dict({"step": num(5)}) + b".")
    return path


EXAMPLES: dict[str, Example] = {
    "torch-zip": Example(torch_zip),
    "safetensors": Example(safetensors_file),
    "dcp": Example(dcp),
    "index": Example(index),
    "legacy-torch": Example(legacy, refused=True),
    "pickle": Example(raw_pickle),
}
ROWS = [pytest.param(row, id=row.name) for row in FORMATS]


def example(row: Format, tmp_path: Path) -> Path:
    folder = tmp_path / row.name
    folder.mkdir()
    return EXAMPLES[row.name].write(folder)


def test_every_row_has_an_example() -> None:
    assert set(EXAMPLES) == {row.name for row in FORMATS}


def test_the_table_keeps_the_names_inspect_always_read() -> None:
    torch = (".pt", ".pth", ".bin", ".ckpt", ".pt.tar", ".pth.tar")
    assert formats.WEIGHT_SUFFIXES[:7] == (*torch, ".safetensors")  # an index's shards
    assert {".index.json"} <= set(formats.CHECKPOINT_NAMES) - set(formats.WEIGHT_SUFFIXES)
    assert {".pkl"} <= set(formats.MEMBER_SUFFIXES) - set(formats.CHECKPOINT_NAMES)


def test_each_row_names_its_own_formats_and_a_limit() -> None:
    names = [row.name for row in FORMATS]
    listed = [n for row in FORMATS for n in row.file_formats()]
    assert len(set(names)) == len(names) and len(set(listed)) == len(listed)
    assert all(row.limit in MAX_BYTES for row in FORMATS)
    assert all(row.sniff or row.named for row in FORMATS)  # each can be recognised


@pytest.mark.parametrize("row", ROWS)
def test_a_file_of_each_format_is_sniffed_as_its_row(row: Format, tmp_path: Path) -> None:
    assert formats.format_of(example(row, tmp_path)) is row


def reads_its_format(report: CheckpointReport, row: Format) -> bool:
    return any(f.format in row.file_formats() for f in report.files)


@pytest.mark.parametrize("row", ROWS)
def test_each_format_is_inspected(row: Format, tmp_path: Path) -> None:
    path = example(row, tmp_path)
    if EXAMPLES[row.name].refused:
        with pytest.raises(UsageError):
            inspect_checkpoint(path)
        return
    report = inspect_checkpoint(path)
    assert reads_its_format(report, row)
    assert report.tensors() or report.root  # a raw pickle of training state holds none
    result = inspect_of(path, pattern=None, follow_links=False)
    assert row.name in result.report["format"]


@pytest.mark.parametrize("row", ROWS)
def test_each_format_is_found_in_its_directory(row: Format, tmp_path: Path) -> None:
    path = example(row, tmp_path)
    folder = tmp_path / row.name
    assert has_members(folder)
    choice = choose_checkpoint(folder, single=True)
    chosen = choice.path if choice else folder  # None: the directory's members are read
    if EXAMPLES[row.name].refused:
        with pytest.raises(UsageError, match=path.name):
            inspect_checkpoint(chosen)
    else:
        assert reads_its_format(inspect_checkpoint(chosen), row)


def hashable(report: CheckpointReport) -> bool:
    """Whether every file that holds tensors is of a row that says where their bytes lie."""
    rows = [formats.by_file(f.format) for f in report.files]
    return all(
        r is not None and r.spans is not None for r in rows if r is None or r.member != INDEX
    )


@pytest.mark.parametrize("row", [r for r in ROWS if not EXAMPLES[r.values[0].name].refused])
def test_each_format_is_compared_and_hashed_where_its_row_can(row: Format, tmp_path: Path) -> None:
    path = example(row, tmp_path)
    report = inspect_checkpoint(path)
    found = digests(report)
    keys = {e.key for e in report.tensors()}
    if hashable(report):
        assert len(found.digests) == len(keys) and not found.unread
    else:
        assert not found.digests and len(found.unread) == len(keys)
    choice = choose_checkpoint(tmp_path / row.name, single=True)
    if choice is not None:  # a directory of pickles alone holds no checkpoint to compare
        result = diff_of(str(choice.path), str(choice.path), follow_links=False, weights=True)
        assert not result.differ and not result.unread
        assert result.side_a.checkpoint is not None
        assert sorted(result.side_a.checkpoint.digests.values()) == sorted(found.digests.values())


@pytest.mark.parametrize("row", ROWS)
def test_each_format_is_read_under_its_rows_limit(
    row: Format, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = example(row, tmp_path)
    monkeypatch.setitem(MAX_BYTES, row.limit, 8)
    with pytest.raises(Refused), command_budget("inspect"):
        inspect_checkpoint(path)


def holder(folder: Path) -> Path:
    """The file of an example that holds its tensors' bytes (not DCP's .metadata, not an
    index): the largest one."""
    files = [
        p
        for p in folder.rglob("*")
        if p.is_file() and p.name != ".metadata" and not p.name.endswith(".json")
    ]
    return max(files, key=lambda p: p.stat().st_size)


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.values[0].spans or r.values[0].member == INDEX]
)
def test_a_short_file_of_each_format_is_incomplete_without_weights(
    row: Format, tmp_path: Path
) -> None:
    """Issue #40: every byte range a row's format declares (a safetensors header's offsets,
    DCP chunks placed by .metadata, a zip member, an index's shards) is checked against its
    file when it is inspected: 4 bytes short, it is an error naming the file, in inspect and
    diff alike, without reading tensor bytes."""
    path = example(row, tmp_path)
    short = holder(tmp_path / row.name)
    short.write_bytes(short.read_bytes()[:-4])
    with pytest.raises(OperationError, match=re.escape(short.name)):
        inspect_checkpoint(path)
    result = diff_of(str(path), str(path), follow_links=False, weights=False)
    assert result.unread and not result.differ and result.code == 3
