"""The folding unpickler (checkpoint/folding.py) builds what the C unpickler builds, but for
big containers, which it keeps as digests (fold.py) that compare, and read again, truly.

No torch needed: the pickles are Python's own, of the values a config holds."""

from __future__ import annotations

import collections
import hashlib
import io
import pickle
import pickletools
import zipfile
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envlock.base.limits import Refused
from envlock.checkpoint.allowed import Work
from envlock.checkpoint.archive import unpickle
from envlock.checkpoint.digest import Digester
from envlock.checkpoint.fold import FOLD_AT, Fold, entries, remembered
from envlock.checkpoint.folding import FoldingUnpickler, Unfoldable
from envlock.checkpoint.pickled import CHUNK, Changed, of_bytes, verified
from envlock.checkpoint.scan import Chunks, scan
from envlock.checkpoint.unpickler import RestrictedUnpickler
from envlock.errors import OperationError
from envlock.runs.diff_folds import inside_of
from tests.hostile_checkpoints import make_corpus

leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=5), inner, max_size=5)
        | st.tuples(inner, inner)
    ),
    max_leaves=30,
)


def _c(data: bytes) -> object:
    return RestrictedUnpickler(io.BytesIO(data), source="t", storage_sizes={}).load()


def _folding(data: bytes) -> object:
    """Read by the folding unpickler, whatever the pickle's size; what it cannot fold, by the
    C unpickler (as archive.py does)."""
    scanned = scan(data)
    try:
        return FoldingUnpickler(
            io.BytesIO(data),
            scanned=scanned,
            reread=None,
            source="t",
            storage_sizes={},
            work=Work(0),
        ).load()
    except Unfoldable:
        return _c(data)


@settings(max_examples=150, deadline=None)
@given(values, st.integers(min_value=0, max_value=4), st.booleans())
def test_it_builds_what_the_c_unpickler_builds(value: object, protocol: int, shared: bool) -> None:
    """Memo slots kept only where read again: shared references still resolve."""
    obj = [value, value, {"again": value}] if shared else value
    data = pickle.dumps(obj, protocol=protocol)
    assert _folding(data) == _c(data)


def _read(obj: object, protocol: int = 2) -> Any:
    data = pickletools.optimize(pickle.dumps(obj, protocol=protocol))
    return unpickle(data, where="t", source="t", sizes={}, name="t", again=_again(data)).root


def _again(data: bytes) -> Any:
    """How archive.py reads a pickle again: its opener, while its file is open."""
    return lambda: nullcontext(of_bytes(data))


@pytest.mark.parametrize("protocol", [0, 1, 2, 4])
def test_a_big_config_is_folded_and_its_change_named_by_reading_again(protocol: int) -> None:
    keys = FOLD_AT * 3
    a = {f"k{i}": f"v{i}" for i in range(keys)}
    b = {**a, "k17": "changed"}
    with remembered() as seen:
        fa, fb = (_read({"config": c, "other": [1, 2]}, protocol)["config"] for c in (a, b))
    assert isinstance(fa, Fold) and isinstance(fb, Fold)
    assert (fa.count, fa.kind) == (keys, "dict") and fa.digest != fb.digest
    assert {fa.hex, fb.hex} <= set(seen)
    same = _read({"config": dict(a), "other": [1, 2]})["config"]
    assert isinstance(same, Fold) and same.digest == fa.digest
    inside = inside_of(fa, fb)
    assert inside.found == [("k17", "v17", "changed")] and inside.note == ""


def test_a_list_folded_says_the_index_and_the_growth() -> None:
    a = [f"shard-{i}" for i in range(FOLD_AT * 2)]
    b = [*a, *(f"new-{i}" for i in range(5_000))]
    b[17] = "replaced"
    fa, fb = (_read({"files": x})["files"] for x in (a, b))
    assert isinstance(fa, Fold) and not fa.is_dict
    inside = inside_of(fa, fb)
    assert inside.found == [("[17]", "shard-17", "replaced")] and inside.grown == 5_000


def test_the_same_items_in_another_order_are_said_so() -> None:
    a = {f"k{i}": i for i in range(FOLD_AT + 10)}
    b = {k: v for k, v in a.items() if k != "k0"} | {"k0": 0}  # one key moved to the end
    fa, fb = (_read({"config": x})["config"] for x in (a, b))
    assert isinstance(fa, Fold) and isinstance(fb, Fold) and fa.digest != fb.digest
    inside = inside_of(fa, fb)
    assert inside.found == [] and "another order" in inside.note


def test_a_change_after_a_fold_read_it_is_read_whole() -> None:
    """A hostile pickle changes a dict after a fold digested it: folded, the change would
    be lost, so the pickle is read whole (by the C unpickler) and the change is there."""
    inner: dict[str, int] = {"x": 1}
    outer = [inner, *range(FOLD_AT + 5)]
    data = bytearray(pickle.dumps([outer, inner], protocol=2))
    # After the list is folded, GET the dict (memo slot of `inner`) and set one more key.
    stop = data.rindex(pickle.STOP)
    get = bytes(data[data.index(b"}") + 1 : data.index(b"}") + 3])  # the BINPUT after {}
    assert get[:1] == pickle.BINPUT
    tail = pickle.BINGET + get[1:] + pickle.SHORT_BINUNICODE + b"\x01y" + pickle.BININT1
    tail += b"\x02" + pickle.SETITEM + pickle.POP
    data[stop:stop] = tail
    root = unpickle(bytes(data), where="t", source="t", sizes={}, name="t").root
    assert isinstance(root, list) and isinstance(root[0], list)  # read whole, not folded
    assert root[0][0] == {"x": 1, "y": 2}


def test_a_big_list_handed_to_a_call_is_read_whole() -> None:
    """`set(list)` reads its argument: a list folded before the call would make it empty."""
    tags = set(range(FOLD_AT + 5))
    assert _read({"tags": tags})["tags"] == tags


def _outcome(read: Any, data: bytes) -> str:
    """What reading `data` gives: the digest of the tree, or the kind of failure."""
    try:
        return Digester().hex(read(data)) or "not digested"
    except Refused:
        return "refused"
    except Exception as exc:
        return f"fails ({type(exc).__name__})"


def _scanned_pickle(path: Path) -> bytes | None:
    """The pickle of a corpus file (a torch zip's data.pkl, or the file), if it passes the
    scan; None for what neither unpickler would be given."""
    try:
        if not path.is_file() or path.stat().st_size > 64 * 2**20:
            return None
        data = path.read_bytes()
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                (name,) = (n for n in archive.namelist() if n.endswith("data.pkl"))
                if archive.getinfo(name).file_size > 64 * 2**20:
                    return None
                data = archive.read(name)
        scan(data)
    except Exception:
        return None
    return data


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The pickle of every case of the hostile corpus (test_hostile.py) that the scan passes."""
    cases = make_corpus.build(tmp_path_factory.mktemp("hostile")).values()
    found = {case.name: _scanned_pickle(case.path) for case in cases}
    return {name: data for name, data in found.items() if data is not None}


def test_every_hostile_pickle_reads_alike_folding_or_not(hostile: dict[str, bytes]) -> None:
    """Every pickle of the corpus that passes the scan, read by both unpicklers: the same
    tree, or a failure in both."""
    assert len(hostile) > 20
    for name, data in hostile.items():
        c, folding = _outcome(_c, data), _outcome(_folding, data)
        assert (c == folding) or ("fails" in c and "fails" in folding), (name, c, folding)


class TensorMeta:
    """An object a pickle names that envlock does not know: read as a stub."""

    def __init__(self, offset: int) -> None:
        self.offset = offset


def test_only_plain_data_is_folded() -> None:
    """A big dict of objects (DCP's metadata is one: a stub per tensor) is kept whole, as
    the readings that walk it need it; a big list of plain values beside it is folded."""
    stubbed = {f"layer{i}.weight": TensorMeta(i) for i in range(FOLD_AT + 5)}
    root = _read({"meta": stubbed, "files": [f"f{i}" for i in range(FOLD_AT + 5)]})
    assert isinstance(root["meta"], dict) and len(root["meta"]) == FOLD_AT + 5
    assert isinstance(root["files"], Fold)


def test_a_big_root_is_kept_whole() -> None:
    """A pickle that is one big dict (a raw pickle of hyperparameters): its entries are the
    checkpoint's own, each compared (training state), so the root is never folded."""
    root = _read({f"k{i}": i for i in range(FOLD_AT + 5)})
    assert isinstance(root, dict) and root["k5"] == 5


def test_a_pickle_changed_since_it_was_read_is_not_read_again() -> None:
    """The second reading keeps entries only from the very bytes the first read (sha256):
    a file rewritten in between says so instead of naming what it no longer holds."""
    config = {f"k{i}": i for i in range(FOLD_AT + 5)}
    data = pickle.dumps({"config": config}, protocol=2)
    changed = pickle.dumps({"config": {**config, "k1": -1}}, protocol=2)
    for again, readable in ((_again(data), True), (_again(changed), False)):
        fold = unpickle(data, where="t", source="t", sizes={}, name="t", again=again).root
        assert (entries(fold["config"], {0}) is not None) is readable


def test_a_dict_become_an_ordered_dict_says_its_type_changed() -> None:
    items = {f"k{i}": i for i in range(FOLD_AT + 5)}
    fa = _read({"config": items})["config"]
    fb = _read({"config": collections.OrderedDict(items)})["config"]
    assert (fa.kind, fb.kind) == ("dict", "OrderedDict") and fa.digest != fb.digest
    assert inside_of(fa, fb).note == "type dict → OrderedDict"


def _in_chunks(data: bytes, sizes: list[int]) -> Chunks:
    """`data` as a scan reads a file: in chunks, here of the given sizes (cycled)."""

    def chunks() -> Iterator[bytes]:
        at, i = 0, 0
        while at < len(data):
            yield data[at : at + sizes[i % len(sizes)]]
            at, i = at + sizes[i % len(sizes)], i + 1

    return Chunks(chunks(), len(data))


def _scanned(data: bytes | Chunks) -> object:
    try:
        return scan(data)
    except Refused:
        return "refused"
    except Exception as exc:
        return type(exc).__name__


@settings(max_examples=150, deadline=None)
@given(
    values,
    st.integers(min_value=0, max_value=4),
    st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=5),
)
def test_a_scan_in_chunks_is_the_scan_of_the_whole(
    value: object, protocol: int, sizes: list[int]
) -> None:
    """Strings, lines and longs that span chunks: the window reads on, or skips, alike."""
    data = pickle.dumps([value, 2**70, "x" * 100, value], protocol=protocol)
    assert _scanned(_in_chunks(data, sizes)) == _scanned(data)
    assert _scanned(_in_chunks(data[:-7], sizes)) == _scanned(data[:-7])  # truncated alike


def test_every_hostile_pickle_scans_alike_in_chunks(hostile: dict[str, bytes]) -> None:
    """Chunks of 1 to 4,096 bytes (a byte at a time for the small ones: every boundary)."""
    for name, data in hostile.items():
        for sizes in ([1], [7, 3], [4096]):
            if len(data) <= 4096 * sizes[0]:
                assert _scanned(_in_chunks(data, sizes)) == _scanned(data), name


def test_a_pickle_changed_between_its_two_readings_is_refused() -> None:
    """The unpickler reads the pickle again: a chunk unlike the scanned one stops it."""
    data = pickle.dumps({"config": {"lr": 0.1}}, protocol=2)
    readings = iter([data, data.replace(b"lr", b"LR")])
    with pytest.raises(OperationError, match="changed while it was read"):
        unpickle(lambda: iter([next(readings)]), size=len(data), where="t", source="t",
                 sizes={}, name="t")  # fmt: skip


def test_bytes_after_the_pickle_are_neither_scanned_nor_read() -> None:
    """A pickle ends at STOP: chunks after it, which the scan never read (no digest), read
    as the end of the file, never as a change; a chunk unlike the scanned one is a change."""
    value = {"config": [f"f{i}" for i in range(100)]}
    data = pickle.dumps(value, protocol=2) + b"\0" * (3 * CHUNK)
    assert unpickle(data, where="t", source="t", sizes={}, name="t").root == value
    first, after = b"a" * CHUNK, b"b" * CHUNK
    scanned = [hashlib.sha256(first).digest()]
    assert verified(iter([first, after]), scanned).read() == first
    with pytest.raises(Changed):
        verified(iter([after]), scanned).read()
