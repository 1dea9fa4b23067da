"""Hostile pickles: bombs of shared references and colliding keys, deep nesting, huge shapes,
names that write to the terminal, code that must not run, and broken pickle programs."""

from __future__ import annotations

import pickle
import struct
from pathlib import Path

from tests.hostile_checkpoints.assemble import (
    PROTO,
    STORAGE,
    Case,
    case,
    get,
    glob,
    num,
    put,
    shared_pairs,
    state_dict,
    tensor,
    uni,
    zipped,
)


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


# --- tensors of other kinds, plain pickles' storages, views of one storage ---------------------


def _sparse(layout: str, data: bytes) -> bytes:
    """`_rebuild_sparse_tensor(_get_layout(layout), data)` with raw data opcodes."""
    get_layout = glob("torch.serialization", "_get_layout") + uni(layout) + b"\x85R"
    return glob("torch._utils", "_rebuild_sparse_tensor") + b"(" + get_layout + data + b"tR"


_SIZE_5X5 = num(5) + num(5) + b"\x86"


@case
def sparse_unknown_layout(d: Path) -> Case:
    coo = _sparse("torch.strided", b"(" + tensor() + tensor("1") + _SIZE_5X5 + b"t")
    pkl = PROTO + state_dict({"s": coo}) + b"."
    return Case("", zipped(d / "sparse_layout.pt", pkl, 2), 3, "sparse tensor of layout")


@case
def sparse_of_sparse(d: Path) -> Case:
    # torch's parts are plain tensors: values that are themselves sparse are no torch file's.
    inner = _sparse("torch.sparse_coo", b"(" + tensor() + tensor("1") + _SIZE_5X5 + b"t")
    outer = _sparse("torch.sparse_coo", b"(" + tensor() + inner + _SIZE_5X5 + b"t")
    pkl = PROTO + state_dict({"s": outer}) + b"."
    return Case("", zipped(d / "sparse_nested.pt", pkl, 2), 3, "not a plain tensor")


@case
def nested_sizes_of_many_dims(d: Path) -> Case:
    # The components' dims come from the sizes tensor's shape: [2, 100000] would be 100,000.
    sizes = tensor("1", shape=num(2) + num(100_000) + b"\x86", stride=num(1) + num(1) + b"\x86")
    nested = glob("torch._utils", "_rebuild_nested_tensor") + b"(" + tensor()
    nested += sizes + tensor("1") + tensor("1") + b"tR"
    pkl = PROTO + state_dict({"n": nested}) + b"."
    return Case("", zipped(d / "nested_dims.pt", pkl, 2), 3, "nested tensor's sizes")


@case
def quantized_bad_parameters(d: Path) -> Case:
    pid = b"(" + uni("storage") + glob("torch", "QInt8Storage") + uni("0") + uni("cpu")
    params = b"(" + glob("torch", "per_channel_affine") + num(1) + b"t"  # no scales, no axis
    qtensor = glob("torch._utils", "_rebuild_qtensor") + b"(" + pid + num(4) + b"tQ" + num(0)
    qtensor += num(4) + b"\x85" + num(1) + b"\x85" + params + b"\x89}tR"
    pkl = PROTO + state_dict({"q": qtensor}) + b"."
    return Case("", zipped(d / "qtensor.pt", pkl), 3, "per-channel parameters")


def _storage_blob() -> bytes:
    """What `_load_from_bytes` is handed: a legacy torch.save stream's header pickles."""
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, 2) + pickle.dumps(1001, 2)
    info = pickle.dumps({"protocol_version": 1001, "little_endian": True}, 2)
    pid = PROTO + b"(" + STORAGE + uni("7") + uni("cpu") + num(4) + b"NtQ."
    return magic + info + pid + pickle.dumps(["7"], 2) + struct.pack("<q", 4) + b"\0" * 16


def _bytes(data: bytes) -> bytes:
    return b"B" + struct.pack("<I", len(data)) + data  # BINBYTES


@case
def storage_blob_handed_to_many_calls(d: Path) -> Case:
    # One memoized blob, 30,000 calls: each decodes its header again; the work is charged.
    blob = _storage_blob()
    load = glob("torch.storage", "_load_from_bytes") + put(0) + b"0"
    memo = _bytes(blob) + put(1) + b"0"
    calls = (get(0) + get(1) + b"\x85R0") * 30_000
    path = d / "blob_calls.pt"
    path.write_bytes(PROTO + load + memo + calls + b"N.")
    return Case("", path, 3, "refusing")


@case
def storage_blob_described(d: Path) -> Case:
    # A plain pickle.dump of a tensor: its storage blob read for type and size, never loaded.
    blob = _storage_blob()
    storage = glob("torch.storage", "_load_from_bytes") + _bytes(blob)
    rebuilt = glob("torch._utils", "_rebuild_tensor_v2") + b"(" + storage + b"\x85R"
    rebuilt += num(0) + num(4) + b"\x85" + num(1) + b"\x85\x89}tR"
    path = d / "blob.pt"
    path.write_bytes(PROTO + state_dict({"w": rebuilt}) + b".")
    return Case("", path, 0, present=("raw pickle, not a torch zip archive", "float32"))


@case
def views_interleaved_past_budget(d: Path) -> Case:
    # Ten views of one storage cut into 100,000 runs each: counted whole past the budget.
    view = tensor(shape=num(100_000) + num(2) + b"\x86", stride=num(4) + num(1) + b"\x86")
    items = {f"v{i}": view.replace(num(100_000), num(100_000 - i)) for i in range(10)}
    pkl = PROTO + state_dict(items) + b"."
    return Case("", zipped(d / "views.pt", pkl), 0, present=("interleave too finely",))
