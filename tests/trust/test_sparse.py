"""A sparse file claims bytes it never wrote: `truncate -s 1T` makes a terabyte of holes in
no time and no space. envlock never reads such a file whole (agent/core.py's `sparse`, by
st_blocks, then SEEK_HOLE/SEEK_DATA): `data --deep` names it among the unreadable and hashes
the rest, `diff --weights` refuses it (exit 3), adopt refuses it (test_adopt_refusals.py).
Before, each read a terabyte of zeros: the table's timeouts fail on that.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.trust.test_readers import within_seconds

TiB = 2**40


def holes(path: Path, size: int, head: bytes = b"") -> None:
    """`head`, then holes up to `size` bytes."""
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(size)


def test_data_deep_names_a_sparse_file_and_hashes_the_rest(tmp_path: Path) -> None:
    from envlock.agent.dataset import dataset_fingerprint

    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 1000)
    holes(data / "giant.bin", TiB, b"head")
    # Holes in a small file, and a dense file past the size where holes are looked for:
    # both read whole, as before.
    holes(data / "small-holes.bin", 1 << 20, b"x")
    (data / "dense.bin").write_bytes(os.urandom(1 << 16) * 1100)  # 68.75 MiB on disk
    found = within_seconds(lambda: dataset_fingerprint(str(data), deep=True), 60)
    assert isinstance(found, dict)
    assert found["files"] == 4 and found["bytes"] == TiB + 1000 + (1 << 20) + (1 << 16) * 1100
    assert found["unreadable"] == 1
    (named,) = found["unreadable_named"]
    assert named.startswith("giant.bin (a sparse file (1,099,511,627,776 bytes, ")
    assert named.endswith("on disk), not hashed)")
    assert found["content_sha256"]
    # What is hashed is what was read whole: the same digest without the giant.
    (data / "giant.bin").unlink()
    again = dataset_fingerprint(str(data), deep=True)
    assert again["content_sha256"] == found["content_sha256"] and again["unreadable"] == 0


def test_the_rule_counts_holes_not_blocks(tmp_path: Path) -> None:
    from envlock.agent.core import SPARSE_FROM, hole_bytes, sparse

    giant = tmp_path / "giant"
    holes(giant, TiB, b"h" * 4096)
    fd = os.open(giant, os.O_RDONLY)
    try:
        assert hole_bytes(fd, TiB) >= TiB - (1 << 20)
        assert sparse(fd, os.fstat(fd)).startswith("a sparse file (1,099,511,627,776 bytes")
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0  # left where a reader starts
    finally:
        os.close(fd)
    small = tmp_path / "small"
    holes(small, SPARSE_FROM, b"s")
    fd = os.open(small, os.O_RDONLY)
    try:
        assert sparse(fd, os.fstat(fd)) is None  # not past SPARSE_FROM: read whole
    finally:
        os.close(fd)


def safetensors_sparse(path: Path, numel: int) -> None:
    """A safetensors file whose one tensor's bytes are all holes (the header written)."""
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [numel], "data_offsets": [0, numel * 4]}}
    ).encode()
    holes(path, 8 + len(header) + numel * 4, len(header).to_bytes(8, "little") + header)


def test_diff_weights_refuses_sparse_holes_at_once(tmp_path: Path) -> None:
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    safetensors_sparse(a, TiB // 4)
    safetensors_sparse(b, TiB // 4)
    done = subprocess.run(
        [sys.executable, "-m", "envlock", "diff", "--weights", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=60,  # digesting a terabyte of zeros would never finish in time
    )
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "is a sparse file (1,099,511,627," in done.stderr, done.stderr
    assert "its holes are not read" in done.stderr and "without --weights" in done.stderr
    # Without --weights the same pair is compared by what its headers say.
    plain = subprocess.run(
        [sys.executable, "-m", "envlock", "diff", str(a), str(b)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plain.returncode == 0, (plain.stdout, plain.stderr)
