"""Generate the hostile checkpoint corpus: files built to hang, exhaust, crash or fool `inspect`.

    python tests/hostile_checkpoints/make_corpus.py DEST   # writes every case under DEST

tests/test_hostile_inspect.py builds it into a temporary directory and runs the real CLI on each
case. Pickles are written opcode by opcode (pickle.dumps cannot express most of them); no torch
is needed. Each `Case` says what inspect must do: describe it (exit 0) or refuse it (exit 3),
which text must or must not reach the output, and which canary file must never appear.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
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


# --- the cases ----------------------------------------------------------------------------------

Builder = Callable[[Path], Case]
CASES: dict[str, Builder] = {}


def case(fn: Builder) -> Builder:
    CASES[fn.__name__] = fn
    return fn


@case
def hash_bomb_tuple_key(d: Path) -> Case:
    # The 620-byte original: a dict keyed by a tuple of 2**60 shared paths hashes forever.
    pkl = PROTO + shared_pairs(60, b")") + b"}" + get(60) + num(1) + b"s."
    return Case("", zipped(d / "hash_key.pt", pkl), 3, "refusing")


@case
def hash_bomb_set_call(d: Path) -> Case:
    # builtins.set([t60]): hashing inside an allow-listed call, not an opcode.
    pkl = PROTO + shared_pairs(60, b")") + glob("builtins", "set") + b"(]" + get(60) + b"atR."
    return Case("", zipped(d / "hash_set.pt", pkl), 3, "refusing")


@case
def hash_bomb_frozenset(d: Path) -> Case:
    pkl = b"\x80\x04" + shared_pairs(60, b")") + b"(" + get(60) + b"\x91."
    return Case("", zipped(d / "hash_frozenset.pt", pkl), 3, "refusing")


@case
def hash_bomb_ordered_dict(d: Path) -> Case:
    pairs = b"(]" + get(60) + num(1) + b"\x86atR"  # ([(t60, 1)],)
    pkl = PROTO + shared_pairs(60, b")") + glob("collections", "OrderedDict") + pairs + b"."
    return Case("", zipped(d / "hash_odict.pt", pkl), 3, "refusing")


@case
def colliding_int_keys(d: Path) -> Case:
    # 30,000 ints that all hash to 1 (Python hashes ints modulo 2**61-1): a quadratic dict.
    keys = b"".join(num(1 + i * (2**61 - 1)) + num(0) for i in range(30_000))
    return Case("", zipped(d / "collide_keys.pt", PROTO + b"}(" + keys + b"u."), 3, "refusing")


@case
def colliding_set_items(d: Path) -> Case:
    items = b"".join(num(1 + i * (2**61 - 1)) for i in range(30_000))
    pkl = PROTO + glob("builtins", "set") + b"(](" + items + b"etR."
    return Case("", zipped(d / "collide_set.pt", pkl), 3, "refusing")


@case
def billion_laughs_persistent_id(d: Path) -> Case:
    # The 464-byte original: a list of 5**12 shared paths where a storage's device belongs.
    laughs = b"]" + put(0) + b"0"
    for i in range(12):
        laughs += b"(" + get(i) * 5 + b"l" + put(i + 1) + b"0"
    pid = b"(" + STORAGE + uni("0") + get(12) + num(4) + b"tQ"
    pkl = PROTO + laughs + pid + b"."
    return Case("", zipped(d / "laughs_pid.pt", pkl), 3, "corrupt")


@case
def billion_laughs_persistent_id_shape(d: Path) -> Case:
    # ... and as the whole persistent id, whose error message used to repr it.
    laughs = b"]" + put(0) + b"0"
    for i in range(12):
        laughs += b"(" + get(i) * 5 + b"l" + put(i + 1) + b"0"
    pkl = PROTO + laughs + get(12) + b"Q."
    return Case("", zipped(d / "laughs_pid_whole.pt", pkl), 3, "corrupt")


@case
def billion_laughs_config(d: Path) -> Case:
    # 2**40 paths to walk, but no tensor in them: described in bounded time.
    pkl = PROTO + shared_pairs(40, b"]", b"\x86") + state_dict({"config": get(40), "m": get(40)})
    return Case("", zipped(d / "laughs_config.pt", pkl + b"."), 0, present=("config",))


@case
def inflated_tensor_keys(d: Path) -> Case:
    # One tensor reached by 2**40 key paths: the walk refuses to list them.
    pkl = PROTO + tensor() + put(0) + b"0"
    for i in range(40):
        pkl += get(i) + get(i) + b"\x86" + put(i + 1) + b"0"
    return Case("", zipped(d / "inflated_keys.pt", pkl + get(40) + b"."), 3, "refusing")


@case
def deep_tuple(d: Path) -> Case:
    # The segfault: a tuple nested 2,000,000 deep (2 MB of TUPLE1).
    return Case(
        "", zipped(d / "deep_tuple.pt", PROTO + b")" + b"\x85" * 2_000_000 + b"."), 3, "refusing"
    )


@case
def deep_tuple_key(d: Path) -> Case:
    pkl = PROTO + b"})" + b"\x85" * 2_000_000 + num(1) + b"s."
    return Case("", zipped(d / "deep_key.pt", pkl), 3, "refusing")


@case
def deep_list(d: Path) -> Case:
    return Case(
        "", zipped(d / "deep_list.pt", PROTO + b"]" * 100_000 + b"a" * 99_999 + b"."), 3, "refusing"
    )


@case
def deep_dict(d: Path) -> Case:
    pkl = PROTO + (b"}" + uni("k")) * 100_000 + b"}" + b"s" * 100_000 + b"."
    return Case("", zipped(d / "deep_dict.pt", pkl), 3, "refusing")


@case
def deep_by_late_appends(d: Path) -> Case:
    # Lists linked outer-first, so each looks shallow when it is added: the walks still bound it.
    n = 50_000
    pkl = PROTO + b"".join(b"]" + put(i) + b"0" for i in range(n))
    pkl += b"".join(get(i) + get(i + 1) + b"a0" for i in range(n - 1))
    return Case("", zipped(d / "deep_late.pt", pkl + state_dict({"x": get(0)}) + b"."), 0)


@case
def memo_index_bomb(d: Path) -> Case:
    return Case("", zipped(d / "memo_bomb.pt", PROTO + b"}r\xff\xff\xff\x7f."), 3, "memo index")


@case
def memo_sparse_index(d: Path) -> Case:
    return Case("", zipped(d / "memo_sparse.pt", PROTO + b"}q\x00]r\x00\x00\x10\x00."), 3, "memo")


@case
def shared_call_arguments(d: Path) -> Case:
    # One 20,000-item argument tuple handed to 2,000 calls: 40 million copied references.
    args = b"(" + num(1) * 20_000 + b"t" + put(0) + b"0"
    calls = (glob("m", "Cls") + put(1) + b"0") + (get(1) + get(0) + b"R0") * 2_000
    return Case("", zipped(d / "shared_args.pt", PROTO + args + calls + b"N."), 3, "refusing")


@case
def shared_bytes_copies(d: Path) -> Case:
    # bytearray(200 kB of memoized bytes) 100 times: 20 MB made from 200 kB.
    blob = b"B" + struct.pack("<I", 200_000) + b"\0" * 200_000 + put(0) + b"0"
    calls = (glob("builtins", "bytearray") + get(0) + b"\x85R0") * 100
    return Case(
        "", zipped(d / "shared_bytes.pt", b"\x80\x03" + blob + calls + b"N."), 3, "refusing"
    )


@case
def many_globals(d: Path) -> Case:
    pkl = PROTO + b"".join(glob("evil", f"C{i}") + b"0" for i in range(12_000)) + b"N."
    return Case("", zipped(d / "many_globals.pt", pkl), 3, "refusing")


@case
def long_global_name(d: Path) -> Case:
    return Case(
        "", zipped(d / "long_global.pt", PROTO + glob("m", "x" * 5000) + b")R."), 3, "refusing"
    )


@case
def shape_of_huge_dims(d: Path) -> Case:
    # 100k copies of 2**63-1: the element count used to take minutes to multiply out.
    shape = b"(" + num(2**63 - 1) + put(0) + get(0) * 99_999 + b"t"
    pkl = PROTO + state_dict({"w": tensor(shape=shape)}) + b"."
    return Case("", zipped(d / "huge_shape.pt", pkl), 3, "refusing")


@case
def shape_of_5000_digit_dim(d: Path) -> Case:
    pkl = PROTO + state_dict({"w": tensor(shape=num(10**5000) + b"\x85")}) + b"."
    return Case("", zipped(d / "digits_dim.pt", pkl), 3, "refusing")


@case
def shape_negative(d: Path) -> Case:
    pkl = PROTO + state_dict({"w": tensor(shape=b"J\xff\xff\xff\xff\x85")}) + b"."
    return Case("", zipped(d / "negative_dim.pt", pkl), 3, "negative")


@case
def shape_overflowing_numel(d: Path) -> Case:
    shape = num(2**62) + num(2**62) + b"\x86"
    pkl = PROTO + state_dict({"w": tensor(shape=shape, stride=num(1) + num(1) + b"\x86")})
    return Case("", zipped(d / "numel_overflow.pt", pkl + b"."), 3, "refusing")


@case
def huge_int_in_config(d: Path) -> Case:
    pkl = PROTO + state_dict({"config": state_dict({"seed": num(7**40_000)}), "step": num(7**9000)})
    return Case("", zipped(d / "huge_int.pt", pkl + b"."), 0, present=("-bit int",))


@case
def long_keys_shared(d: Path) -> Case:
    # A 100 kB key memoized and nested 60 deep above a tensor: keys of 6 MB each, if built.
    pkl = PROTO + uni("k" * 100_000) + put(0) + b"0" + tensor()
    for _ in range(60):
        pkl = pkl + put(1) + b"0}" + get(0) + get(1) + b"s"
    return Case("", zipped(d / "long_keys.pt", pkl + b"."), 0, present=("chars)",))


@case
def surrogate_key(d: Path) -> Case:
    pkl = PROTO + state_dict({"\ud800": tensor(), "ok": num(1)}) + b"."
    return Case("", zipped(d / "surrogate.pt", pkl), 0, present=("\\ud800",))


@case
def escape_sequences(d: Path) -> Case:
    # Keys and a global that clear the screen and the line: the warning must survive, escaped.
    canary = d / "CANARY-escape"
    payload = glob("posix", "system\x1b[2K") + b"(" + uni(f"touch {canary}") + b"tR"
    keys = {"\x1b[2Jmodel.w": tensor(), "\x1b[2Kerase": payload, "x\x9b2J": num(1)}
    pkl = PROTO + state_dict(keys) + b"."
    return Case(
        "",
        zipped(d / "escapes.pt", pkl),
        0,
        present=("\\x1b[2Jmodel.w", "code-running globals", "\\x9b2J"),
        canary=canary,
    )


@case
def code_running_payloads(d: Path) -> Case:
    # The usual tricks, all in one file: each global is described, none is called.
    canary = d / "CANARY-payload"
    touch = f"touch {canary}"
    getattr_chain = (
        glob("builtins", "getattr") + glob("builtins", "__import__") + uni("os") + b"\x85R"
        + uni("system") + b"\x86R" + uni(touch) + b"\x85R"
    )  # fmt: skip
    items = {
        "eval": glob("builtins", "eval") + uni(f"__import__('os').system({touch!r})") + b"\x85R",
        "popen": glob("subprocess", "Popen") + b"(](" + uni("touch") + uni(str(canary)) + b"etR",
        "chain": getattr_chain,
        "inst": b"(" + uni(touch) + b"ios\nsystem\n",
        "reduce": glob("os", "system") + uni(touch) + b"\x85R",
    }
    pkl = PROTO + b"}(" + b"".join(uni(k) + v for k, v in items.items()) + b"u."
    suspicious = ("builtins.eval", "subprocess.Popen", "builtins.getattr", "os.system")
    return Case("", zipped(d / "payloads.pt", pkl), 0, present=suspicious, canary=canary)


@case
def build_on_allowed_function(d: Path) -> Case:
    # BUILD on an allow-listed function would set its __code__: refused as corrupt.
    pkl = glob("torch._utils", "_rebuild_tensor_v2") + b"}" + uni("__code__") + b"Nsb."
    return Case("", zipped(d / "build_fn.pt", PROTO + pkl), 3, "modify a function")


@case
def code_running_described(d: Path) -> Case:
    canary = d / "CANARY-system"
    pkl = PROTO + state_dict({"x": glob("posix", "system") + uni(f"touch {canary}") + b"\x85R"})
    return Case(
        "", zipped(d / "system.pt", pkl + b"."), 0, present=("posix.system",), canary=canary
    )


@case
def protocol_5_buffers(d: Path) -> Case:
    return Case("", zipped(d / "buffers.pt", b"\x80\x05\x97."), 3, "invalid opcode")


@case
def truncated_pickle(d: Path) -> Case:
    return Case(
        "", zipped(d / "truncated.pt", PROTO + state_dict({"w": tensor()})[:-9]), 3, "corrupt"
    )


@case
def stack_underflow(d: Path) -> Case:
    # REDUCE reaching below a MARK, BUILD with nothing to build on.
    return Case("", zipped(d / "underflow.pt", PROTO + b"N(NRb."), 3, "corrupt")


@case
def raw_pickle(d: Path) -> Case:
    path = d / "raw.pt"
    path.write_bytes(pickle.dumps({"losses": [1.0, 2.0], "step": 3}, 2))
    return Case("", path, 0, present=("raw pickle, not a torch zip archive", "step"))


@case
def raw_pickle_hash_bomb(d: Path) -> Case:
    path = d / "raw_bomb.pt"
    path.write_bytes(PROTO + shared_pairs(60, b")") + b"}" + get(60) + num(1) + b"s.")
    return Case("", path, 3, "refusing")


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


# --- building -----------------------------------------------------------------------------------


def build(dest: Path) -> dict[str, Case]:
    """Write every case under `dest` (an empty directory); their descriptions by name."""
    dest.mkdir(parents=True, exist_ok=True)
    raw_pickle(dest)  # other cases link to it
    return {name: replace(make(dest), name=name) for name, make in CASES.items()}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py DEST")
    for name, made in build(Path(sys.argv[1])).items():
        print(f"{name:36} exit {made.exit_code}  {made.path}")


if __name__ == "__main__":
    main()
