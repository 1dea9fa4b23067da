"""Hostile files around the pickle: zip archives that lie or inflate, safetensors headers that
nest, overflow or write to the terminal, indexes that leave their directory or loop, and
checkpoint directories with symlinks to secrets and FIFOs."""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

from tests.hostile_checkpoints.assemble import (
    PROTO,
    ST_SPEC,
    Case,
    MiB,
    case,
    declare_size,
    flag_encrypted,
    safetensors,
    zipped,
)

# --- zip archives -------------------------------------------------------------------------------


@case
def deflate_declaring_1gib(d: Path) -> Case:
    path = zipped(d / "deflate_1g.pt", b"\0" * (4 * MiB), method=zipfile.ZIP_DEFLATED)
    return Case("", declare_size(path, "deflate_1g/data.pkl", 2**30), 3, "refusing")


@case
def bzip2_declaring_1gib(d: Path) -> Case:
    path = zipped(d / "bzip2_1g.pt", b"N0" * MiB + b"N.", method=zipfile.ZIP_BZIP2)
    return Case("", declare_size(path, "bzip2_1g/data.pkl", 2**30), 3, "bzip2")


@case
def lzma_member(d: Path) -> Case:
    path = zipped(d / "lzma.pt", b"N0" * 1000 + b"N.", method=zipfile.ZIP_LZMA)
    return Case("", path, 3, "lzma")


@case
def deflate_inflating_1000x(d: Path) -> Case:
    # Honest sizes, 16 MB from 16 kB: refused by the compression ratio, before inflating.
    pkl = PROTO + b"N0" * (8 * MiB - 2) + b"N."
    return Case("", zipped(d / "deflate_ratio.pt", pkl, method=zipfile.ZIP_DEFLATED), 3, "refusing")


@case
def deflate_lying_small(d: Path) -> Case:
    # Declares 1 kB, holds 16 MB: zipfile stops at the declared size and the CRC fails.
    pkl = PROTO + b"N0" * (8 * MiB) + b"N."
    path = zipped(d / "deflate_lie.pt", pkl, method=zipfile.ZIP_DEFLATED)
    return Case("", declare_size(path, "deflate_lie/data.pkl", 1000), 3, "corrupt")


@case
def zip_claiming_2m_entries(d: Path) -> Case:
    # A zip64 end record declaring 2 million entries: refused before zipfile builds them.
    path = zipped(d / "entries.pt", PROTO + b"N.")
    data = path.read_bytes()
    end = data.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack_from("<II", data, end + 12)
    n = 2_000_000
    record = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, cd_size, cd_offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, end, 1)
    path.write_bytes(data[:end] + record + locator + data[end:])
    return Case("", path, 3, "refusing")


@case
def encrypted_member(d: Path) -> Case:
    path = zipped(d / "encrypted.pt", PROTO + b"N.")
    return Case("", flag_encrypted(path, "encrypted/data.pkl"), 3, "encrypted")


# --- safetensors --------------------------------------------------------------------------------


@case
def st_deep_json(d: Path) -> Case:
    raw = b'{"w": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    return Case("", safetensors(d / "deep.safetensors", raw), 3, "refusing")


@case
def st_infinite_dim(d: Path) -> Case:
    raw = json.dumps(ST_SPEC).replace("[4]", "[1e400]").encode()
    return Case("", safetensors(d / "inf.safetensors", raw, b"\0" * 16), 3, "corrupt")


@case
def st_5000_digit_dim(d: Path) -> Case:
    raw = json.dumps(ST_SPEC).replace("[4]", "[" + "9" * 5000 + "]").encode()
    return Case("", safetensors(d / "digits.safetensors", raw, b"\0" * 16), 3, "not valid JSON")


@case
def st_dim_past_int64(d: Path) -> Case:
    raw = json.dumps(ST_SPEC).replace("[4]", f"[{2**64}]").encode()
    return Case("", safetensors(d / "int64.safetensors", raw, b"\0" * 16), 3, "corrupt")


@case
def st_100k_dims(d: Path) -> Case:
    spec = {"w": {"dtype": "F32", "shape": [1] * 100_000, "data_offsets": [0, 4]}}
    return Case("", safetensors(d / "dims.safetensors", spec, b"\0" * 4), 3, "refusing")


@case
def st_header_length(d: Path) -> Case:
    return Case(
        "", safetensors(d / "length.safetensors", ST_SPEC, b"\0" * 16, 2**63), 3, "refusing"
    )


@case
def st_odd_fields(d: Path) -> Case:
    spec = {"w": {"dtype": ["F32"] * 1000, "shape": [4], "data_offsets": [16, 0]}}
    return Case("", safetensors(d / "odd.safetensors", spec, b"\0" * 16), 3, "corrupt")


@case
def st_surrogate_and_escapes(d: Path) -> Case:
    spec = {
        "\ud800": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "\x1b[2Jw\x1b[2K": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
        "\u202eevil": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
    }
    raw = json.dumps(spec).encode()  # ensure_ascii: the lone surrogate stays a \\ud800 escape
    path = safetensors(d / "names.safetensors", raw, b"\0" * 12)
    return Case("", path, 0, present=("\\ud800", "\\x1b[2Jw\\x1b[2K", "\\u202eevil"))


# --- indexes and directories --------------------------------------------------------------------


def _shard(path: Path) -> Path:
    return safetensors(path, ST_SPEC, b"\0" * 16)


@case
def index_self_reference(d: Path) -> Case:
    path = d / "self.index.json"
    path.write_text(json.dumps({"weight_map": {"w": "self.index.json"}}))
    return Case("", path, 3, "not a .safetensors")


@case
def index_cycle(d: Path) -> Case:
    (d / "b.index.json").write_text(json.dumps({"weight_map": {"w": "a.index.json"}}))
    path = d / "a.index.json"
    path.write_text(json.dumps({"weight_map": {"w": "b.index.json"}}))
    return Case("", path, 3, "not a .safetensors")


@case
def index_traversal(d: Path) -> Case:
    _shard(d / "outside.safetensors")
    (d / "ckpt").mkdir()
    path = d / "ckpt" / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": {"w": "../outside.safetensors"}}))
    return Case("", path, 3, "outside the index's directory")


@case
def index_absolute_shard(d: Path) -> Case:
    outside = _shard(d / "absolute.safetensors")
    (d / "abs").mkdir()
    path = d / "abs" / "model.safetensors.index.json"
    path.write_text(json.dumps({"weight_map": {"w": str(outside)}}))
    return Case("", path, 3, "outside the index's directory")


@case
def index_deep_json(d: Path) -> Case:
    path = d / "deep.index.json"
    path.write_bytes(b'{"weight_map": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    return Case("", path, 3, "refusing")


@case
def dir_symlinked_secrets(d: Path) -> Case:
    secret = d / "secret-key.json"
    secret.write_text(json.dumps({"private_key": "SECRET-KEY-MATERIAL"}))
    ckpt = d / "linked"
    ckpt.mkdir()
    _shard(ckpt / "model.safetensors")
    (ckpt / "config.json").symlink_to(secret)
    (ckpt / "other.pt").symlink_to(d / "raw.pt")
    return Case(
        "", ckpt, 0, present=("skipped config.json", "--follow-links"),
        absent=("SECRET-KEY-MATERIAL", "private_key"),
    )  # fmt: skip


@case
def dir_index_traversal(d: Path) -> Case:
    ckpt = d / "dir_traversal"
    ckpt.mkdir()
    _shard(ckpt / "model.safetensors")
    index = {"weight_map": {"w": "../secret-key.json.safetensors"}}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    return Case("", ckpt, 3, "outside the index's directory")


@case
def dir_hostile_names_and_fifo(d: Path) -> Case:
    ckpt = d / "names"
    ckpt.mkdir()
    _shard(ckpt / "\x1b[2Jmodel.safetensors")
    os.mkfifo(ckpt / "config.json")  # would block a reader forever
    (ckpt / "trainer_state.json").write_bytes(b"[" * 100_000)
    return Case("", ckpt, 0, present=("\\x1b[2Jmodel.safetensors", "skipped trainer_state.json"))
