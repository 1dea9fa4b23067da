"""Read a torch.save file's pickle within limits: a zip archive's `<root>/data.pkl`, or a raw
pickle written by `pickle.dump`.

The zip's directory is trusted for nothing: the member's declared size is checked before it is
read, the bytes are counted while they inflate, and only the compression torch itself can read
(stored or deflated) is accepted. The pickle is then scanned (scan.py) and only then unpickled.
"""

from __future__ import annotations

import hashlib
import io
import mmap
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlock.base.limits import (
    MAX_INFLATION,
    MAX_PICKLE_BYTES,
    MAX_ZIP_ENTRIES,
    MEMORY_BOUND,
    MiB,
    Refused,
    budget,
    printable,
)
from envlock.base.untrusted import open_untrusted, read_untrusted
from envlock.checkpoint.allowed import Work
from envlock.checkpoint.fold import FOLD_AT, Folder, Reread
from envlock.checkpoint.folding import FoldingUnpickler, Unfoldable
from envlock.checkpoint.scan import Scanned, scan
from envlock.checkpoint.unpickler import RestrictedUnpickler
from envlock.errors import OperationError, UsageError

_CORRUPT_HINT = "the checkpoint is truncated or damaged; torch.load would fail on it too"
_PICKLE_LIMIT = f"{MAX_PICKLE_BYTES // MiB} MiB"
_METHODS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}


# A pickle's bytes: in a map of their own when read from a zip (freed whole), else bytes.
Pickled = bytes | mmap.mmap


@dataclass(frozen=True)
class LoadedPickle:
    """The inert object tree of one pickle and the globals that were stubbed."""

    root: Any
    stubbed: Counter[str]
    pickle_name: str
    nbytes: int


def load_torch_zip(
    path: Path, *, within: Path | None = None, follow_links: bool = False
) -> LoadedPickle:
    """Unpickle `<root>/data.pkl` of a torch zip checkpoint into inert descriptions."""

    def again() -> Pickled:  # a fold's entries, read again the same way (fold.py)
        with open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f:
            return _zip_pickle(path, f)[0]

    with open_untrusted(path, "checkpoint", within=within, follow_links=follow_links) as f:
        return _load_zip(path, f, again)


def load_zip_bytes(where: Path, f: Any) -> LoadedPickle:
    """A torch zip already in memory (a DCP shard's blob at its offset), read the same way."""
    return _load_zip(where, f, None)


def _load_zip(path: Path, f: Any, again: Callable[[], Pickled] | None) -> LoadedPickle:
    data, pkl, sizes = _zip_pickle(path, f)
    where = f"{path}: {pkl}"
    try:
        return unpickle(data, where=where, source=path.name, sizes=sizes, name=pkl, again=again)
    finally:
        _release(data)


def _zip_pickle(path: Path, f: Any) -> tuple[Pickled, str, dict[str, int]]:
    """The bytes of the zip's data.pkl, its name, and the sizes of its storages."""
    _check_entries(path, f)
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        raise OperationError(
            f"{path}: not a readable zip archive ({exc}): the checkpoint is truncated or corrupt",
            hint="copy it again from its source, or inspect another checkpoint of the run",
        ) from exc
    with archive:
        _check_extents(path, archive)
        pkl = _find_data_pkl(path, archive.namelist())
        data = _read_member(path, archive, archive.getinfo(pkl))
        prefix = pkl[: -len("data.pkl")] + "data/"
        sizes = {
            info.filename[len(prefix) :]: info.file_size
            for info in archive.infolist()
            if info.filename.startswith(prefix)
        }
    return data, pkl, sizes


def load_raw_pickle(
    path: Path, *, within: Path | None = None, follow_links: bool = False
) -> LoadedPickle:
    """Unpickle a file that is one pickle (no zip around it), e.g. from `pickle.dump`."""

    def again() -> bytes:
        return read_untrusted(path, "pickle", within=within, follow_links=follow_links)

    data = again()
    return unpickle(data, where=str(path), source=path.name, sizes={}, name=path.name, again=again)


def unpickle(
    data: Pickled,
    *,
    where: str,
    source: str,
    sizes: Mapping[str, int],
    name: str,
    again: Callable[[], Pickled] | None = None,
) -> LoadedPickle:
    """Scan, then unpickle with the restricted unpickler; any failure names `where`.

    A pickle with a container past FOLD_AT items is read by the folding unpickler (its big
    config values kept as digests, read `again` where a diff asks what changed in them)."""
    try:
        scanned = scan(data, budget())
        budget().spend("pickle opcodes", scanned.opcodes, where)
        reread = _rereader(again, data, scanned, source, sizes)
        root, stubbed = _unpickled(data, scanned, source, sizes, reread)
    except Refused as exc:
        raise exc.at(where) from None
    except MemoryError:  # under a memory limit lower than MEMORY_BOUND (limits.py)
        raise OperationError(
            f"{where}: ran out of memory reading it (its pickle is within the budgets, which "
            f"need about {MEMORY_BOUND // 2**20} MiB at their limits)",
            hint="raise the process's memory limit (ulimit -v) and run again",
        ) from None
    except Exception as exc:  # any failure to parse an untrusted pickle means corruption
        detail = printable(f"{type(exc).__name__}: {exc}", 300)
        raise OperationError(f"{where} is corrupt ({detail})", hint=_CORRUPT_HINT) from exc
    return LoadedPickle(root, stubbed, name, len(data))


def _unpickled(
    data: Pickled, scanned: Scanned, source: str, sizes: Mapping[str, int], reread: Reread | None
) -> tuple[Any, Counter[str]]:
    """The tree, folded where a container passes FOLD_AT items, and the globals stubbed."""
    if scanned.largest > FOLD_AT:
        folding = _folding(data, scanned, source, sizes, reread)
        try:
            return folding.load(), folding.stubbed
        except Unfoldable:
            pass  # read whole, as any pickle under FOLD_AT
    unpickler = RestrictedUnpickler(
        _file_of(data), source=source, storage_sizes=sizes, work=Work(len(data))
    )
    return unpickler.load(), unpickler.stubbed


def _folding(
    data: Pickled, scanned: Scanned, source: str, sizes: Mapping[str, int], reread: Reread | None
) -> FoldingUnpickler:
    return FoldingUnpickler(
        _file_of(data),
        scanned=scanned,
        reread=reread,
        source=source,
        storage_sizes=sizes,
        work=Work(len(data)),
    )


def _file_of(data: Pickled) -> Any:
    """The pickle as the file an unpickler reads: its map from the start, or bytes in memory."""
    if isinstance(data, mmap.mmap):
        data.seek(0)
        return data
    return io.BytesIO(data)


def _release(data: Pickled) -> None:
    if isinstance(data, mmap.mmap):
        data.close()


def _rereader(
    again: Callable[[], Pickled] | None,
    data: Pickled,
    scanned: Scanned,
    source: str,
    sizes: Mapping[str, int],
) -> Reread | None:
    """How a fold of this pickle is read again: its folders, or None if its bytes changed.

    The same bytes (by sha256) read the same way: the scan that passed them holds, and only
    the entries a diff asks for are kept."""
    if again is None or scanned.largest <= FOLD_AT:
        return None
    first = hashlib.sha256(data).digest()

    def reread() -> dict[int, Folder] | None:
        data: Pickled = b""
        try:
            data = again()
            if hashlib.sha256(data).digest() != first:
                return None
            folding = _folding(data, scanned, source, sizes, None)
            folding.load()
        except Exception:  # changed or unreadable since: nothing is named
            return None
        finally:
            _release(data)
        return folding.by_ordinal

    return reread


def _check_entries(path: Path, f: Any) -> None:
    # zipfile builds an object per entry before anyone can count them: read the count the
    # end-of-directory record declares first (zipfile's own reader of it, where it has one).
    end_record = getattr(zipfile, "_EndRecData", None)
    if end_record is None:
        return
    record = end_record(f)
    entries = record[getattr(zipfile, "_ECD_ENTRIES_TOTAL", 4)] if record else 0
    if entries > MAX_ZIP_ENTRIES:
        raise Refused(f"{path}: the zip's {entries:,} entries", f"{MAX_ZIP_ENTRIES:,} entries")


def _check_extents(path: Path, archive: zipfile.ZipFile) -> None:
    """Every member's bytes, as the zip's directory sizes them, lie before that directory:
    a storage cut short is a truncated checkpoint, said without reading tensor bytes."""
    start = getattr(archive, "start_dir", None)
    if not isinstance(start, int):
        return
    for info in archive.infolist():
        if info.header_offset + info.compress_size > start:
            raise OperationError(
                f"{path}: {printable(info.filename, 200)} ends past the start of the zip's "
                f"directory (byte {start:,}): the checkpoint is truncated or corrupt",
                hint="copy it again from its source, or inspect another checkpoint of the run",
            )


def _find_data_pkl(path: Path, names: list[str]) -> str:
    found = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if not found:
        raise UsageError(
            f"{path}: a zip archive without <root>/data.pkl is not a torch checkpoint",
            hint="envlock inspect reads torch.save files, safetensors files and their indexes",
        )
    # torch names the root folder after the file stem; fall back to the first candidate.
    return next((n for n in found if n == f"{path.stem}/data.pkl"), found[0])


def _read_member(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Pickled:
    where = f"{path}: {info.filename}"
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        # zipfile inflates bzip2 and lzma without an output bound; torch reads neither.
        method = _METHODS.get(info.compress_type, f"method {info.compress_type}")
        raise OperationError(
            f"{where} is compressed with {method}, which torch cannot read",
            hint="torch.save stores data.pkl uncompressed; re-save the checkpoint with torch",
        )
    declared, packed = info.file_size, max(info.compress_size, 1)
    if declared > MAX_PICKLE_BYTES:
        raise Refused(f"{where}: the declared size ({declared:,} bytes)", _PICKLE_LIMIT)
    if declared > MiB and declared > MAX_INFLATION * packed:
        raise Refused(
            f"{where}: inflating {packed:,} bytes to {declared:,}",
            f"{MAX_INFLATION}x compression (past 1 MiB)",
        )
    budget().spend("bytes", declared, where)  # before inflating: the directory is checked
    return _read_counted(where, archive, info, declared)


def _read_counted(
    where: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int
) -> Pickled:
    """The member's bytes, counted as they inflate, into a map of their own: freed whole
    when closed (a diff reads a big config's pickle twice; the C allocator would keep the
    first copy's pages as a heap of the process's own)."""
    if limit == 0:
        return b""
    into, total = mmap.mmap(-1, limit), 0
    try:
        with archive.open(info) as member:  # checks the CRC once the last byte is read
            while chunk := member.read(MiB):
                if total + len(chunk) > limit:  # more than the zip declared: never trust it
                    raise Refused(f"{where}: inflated size", f"the {limit:,} bytes it declares")
                into[total : total + len(chunk)] = chunk
                total += len(chunk)
        if total != limit:
            raise OperationError(
                f"{where} is corrupt (the zip declares {limit:,} bytes; {total:,} were read)",
                hint=_CORRUPT_HINT,
            )
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, ValueError) as exc:
        into.close()
        detail = printable(f"{type(exc).__name__}: {exc}", 300)
        raise OperationError(f"{where} is corrupt ({detail})", hint=_CORRUPT_HINT) from exc
    except BaseException:
        into.close()
        raise
    return into
