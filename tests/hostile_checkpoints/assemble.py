"""Building blocks of the hostile corpus: the `Case` record and its registry, a small pickle
assembler (pickle.dumps cannot express most hostile pickles), and zip and safetensors writers
that can lie in their headers. Nothing here needs torch."""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MiB = 2**20


@dataclass(frozen=True)
class Case:
    """One hostile input and what `envlock inspect` must make of it."""

    name: str
    path: Path
    exit_code: int  # 0: described; 3: refused or rejected with a clear message
    says: str = ""  # a fragment stderr must hold when refused, e.g. "refusing"
    present: tuple[str, ...] = ()  # text the human output must still show
    absent: tuple[str, ...] = ()  # text that must never reach any output
    canary: Path | None = None  # a file the checkpoint tries to create
    args: tuple[str, ...] = field(default_factory=tuple)


# --- a small pickle assembler -------------------------------------------------------------------


def uni(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def num(n: int) -> bytes:
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if 0 <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    raw = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8b" + struct.pack("<i", len(raw)) + raw  # LONG4


def put(i: int) -> bytes:
    return b"q" + bytes([i]) if i < 256 else b"r" + struct.pack("<I", i)


def get(i: int) -> bytes:
    return b"h" + bytes([i]) if i < 256 else b"j" + struct.pack("<I", i)


def glob(module: str, name: str) -> bytes:
    return b"c" + module.encode("utf-8", "surrogatepass") + b"\n" + name.encode() + b"\n"


PROTO = b"\x80\x02"
STORAGE = uni("storage") + glob("torch", "FloatStorage")


def tensor(key: str = "0", shape: bytes = b"K\x04\x85", stride: bytes = b"K\x01\x85") -> bytes:
    """`_rebuild_tensor_v2(storage key, 0, shape, stride, False, {})` with raw shape opcodes."""
    pid = b"(" + STORAGE + uni(key) + uni("cpu") + num(4) + b"tQ"
    return (
        glob("torch._utils", "_rebuild_tensor_v2")
        + b"("
        + pid
        + num(0)
        + shape
        + stride
        + b"\x89}tR"
    )


def state_dict(items: dict[str, bytes]) -> bytes:
    """A dict of raw value opcodes: `{key: value, ...}` (no memo)."""
    return b"}(" + b"".join(uni(k) + v for k, v in items.items()) + b"u"


def shared_pairs(levels: int, first: bytes, pair: bytes = b"\x86") -> bytes:
    """Memo 0 = `first`; memo i+1 = (memo i, memo i): 2**levels paths in a few bytes each."""
    out = first + put(0) + b"0"
    for i in range(levels):
        out += get(i) + get(i) + pair + put(i + 1) + b"0"
    return out


def zipped(path: Path, payload: bytes, storages: int = 1, method: int = zipfile.ZIP_STORED) -> Path:
    """A torch-style zip: `<stem>/data.pkl` and `storages` 16-byte storages."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo(f"{path.stem}/data.pkl"), payload, compress_type=method)
        for key in range(storages):
            zf.writestr(f"{path.stem}/data/{key}", b"\0" * 16)
    return path


def declare_size(path: Path, member: str, size: int) -> Path:
    """Rewrite the uncompressed size a zip member declares, in both of the zip's headers."""
    return _patch_member(path, member, local=(22, struct.pack("<I", size)), central=(24, None))


def flag_encrypted(path: Path, member: str) -> Path:
    """Set the "encrypted" bit of a member's flags, in both of the zip's headers."""
    return _patch_member(path, member, local=(6, b"\x01"), central=(8, None))


def _patch_member(
    path: Path, member: str, local: tuple[int, bytes], central: tuple[int, bytes | None]
) -> Path:
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    data[info.header_offset + local[0] : info.header_offset + local[0] + len(local[1])] = local[1]
    end = data.rfind(b"PK\x05\x06")
    entries, _, offset = struct.unpack_from("<HII", data, end + 10)
    for _ in range(entries):  # the central directory: one variable-length record per member
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, offset + 28)
        if data[offset + 46 : offset + 46 + name_len] == member.encode():
            value = central[1] if central[1] is not None else local[1]
            data[offset + central[0] : offset + central[0] + len(value)] = value
        offset += 46 + name_len + extra_len + comment_len
    path.write_bytes(bytes(data))
    return path


def safetensors(
    path: Path, header: bytes | object, data: bytes = b"", length: int | None = None
) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


ST_SPEC = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}


# --- the registry: pickle_cases.py and file_cases.py fill it ------------------------------------

Builder = Callable[[Path], Case]
CASES: dict[str, Builder] = {}


def case(fn: Builder) -> Builder:
    CASES[fn.__name__] = fn
    return fn
