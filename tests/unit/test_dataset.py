"""A dataset's fingerprint (agent/dataset.py) against a reference written from its
definition: the listing (path, size, mtime_ns of every file), the sample (the first and last
64 KiB of each sampled file), the deep digest (sha256 of each file's sha256), globs, files,
what cannot be read, and the deadline. test_data.py's cases show each level sees its edits;
these pin every field of the answer."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from envlock.agent import dataset
from envlock.agent.dataset import SAMPLE_BYTES, dataset_fingerprint, sampled

SIZES = {"a.bin": 10, "sub/b.bin": SAMPLE_BYTES + 7, "sub/deeper/c.bin": 2 * SAMPLE_BYTES + 9}
SIZES["sub/e.bin"] = 2 * SAMPLE_BYTES  # at the bound: its tail is what follows the head
SIZES["empty"] = 0


def make_tree(top: Path) -> Path:
    for number, (rel, size) in enumerate(sorted(SIZES.items())):
        path = top / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes((i * 7 + number) % 256 for i in range(size)))
        os.utime(path, ns=(1_600_000_000_000_000_000 + number, 1_700_000_000_123_456_789 + number))
    return top


def reference(top: Path, rels: list[str], deep: bool = False) -> dict[str, Any]:
    """The fingerprint as dataset.py's docstring defines it."""
    files = []
    for rel in sorted(rels):
        st = (top / rel).stat()
        files.append((rel, st.st_size, st.st_mtime_ns, (top / rel).read_bytes()))
    listing = "".join(f"{rel}\0{size}\0{mtime}\n" for rel, size, mtime, _ in files)
    sample = hashlib.sha256()
    for rel, size, _, data in files:  # fewer than SAMPLE_FILES: all are sampled
        head = data[:SAMPLE_BYTES]
        tail = data[SAMPLE_BYTES:] if size <= 2 * SAMPLE_BYTES else data[-SAMPLE_BYTES:]
        sample.update(f"{rel}\0".encode() + head + b"\0" + tail)
    answer = {
        "path": str(top),
        "missing": False,
        "files": len(files),
        "bytes": sum(size for _, size, _, _ in files),
        "newest_mtime": max(mtime for _, _, mtime, _ in files) / 1e9,
        "listing_sha256": hashlib.sha256(listing.encode()).hexdigest(),
        "sample_sha256": sample.hexdigest(),
        "unreadable": 0,
        "unreadable_named": [],
    }
    if deep:
        total = hashlib.sha256()
        for rel, _, _, data in files:
            total.update(f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode())
        answer["content_sha256"] = total.hexdigest()
    return answer


def without_seconds(answer: dict[str, Any]) -> dict[str, Any]:
    seconds = answer.pop("seconds")
    assert isinstance(seconds, float) and 0 <= seconds < 60
    return answer


@pytest.mark.parametrize("deep", [False, True])
def test_a_directory_s_fingerprint_is_the_reference_s(tmp_path: Path, deep: bool) -> None:
    top = make_tree(tmp_path / "data")
    got = without_seconds(dataset_fingerprint(str(top), deep=deep))
    assert got == reference(top, list(SIZES), deep=deep)


def test_a_file_and_a_glob_are_listed_from_their_directory(tmp_path: Path) -> None:
    top = make_tree(tmp_path / "data")
    one = without_seconds(dataset_fingerprint(str(top / "sub" / "b.bin")))
    expected = reference(top / "sub", ["b.bin"])
    assert one == {**expected, "path": str(top / "sub" / "b.bin")}
    pattern = str(top / "sub" / "**" / "*.bin")
    globbed = without_seconds(dataset_fingerprint(pattern))
    rels = ["b.bin", "deeper/c.bin", "e.bin"]  # relative to the part before the magic
    assert globbed == {**reference(top / "sub", rels), "path": pattern}
    for part in ("dee?er", "[d]eeper"):  # listed from the directory before the magic
        pattern = str(top / "sub" / part / "c.bin")
        got = without_seconds(dataset_fingerprint(pattern))
        assert got == {**reference(top / "sub", ["deeper/c.bin"]), "path": pattern}


def test_a_relative_path_is_listed_from_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = make_tree(tmp_path / "data")
    monkeypatch.chdir(top)
    plain = without_seconds(dataset_fingerprint("a.bin"))
    assert plain == {**reference(top, ["a.bin"]), "path": "a.bin"}
    globbed = without_seconds(dataset_fingerprint("*.bin"))
    assert globbed == {**reference(top, ["a.bin"]), "path": "*.bin"}


def test_what_cannot_be_read_is_counted_and_named(tmp_path: Path) -> None:
    top = make_tree(tmp_path / "data")
    for number in range(dataset.MAX_NAMED + 2):
        (top / f"gone-{number:02d}").symlink_to(tmp_path / "nothing")
    os.mkfifo(top / "sub" / "pipe")  # not a file a run reads: not listed, not unreadable
    got = dataset_fingerprint(str(top), deep=True)
    assert got["files"] == len(SIZES) and got["unreadable"] == dataset.MAX_NAMED + 2
    assert got["unreadable_named"] == [f"gone-{n:02d}" for n in range(dataset.MAX_NAMED)]
    under_a_file = dataset_fingerprint(str(top / "a.bin" / "x"))
    assert under_a_file["files"] == 0 and under_a_file["unreadable_named"] == ["x"]
    assert under_a_file["listing_sha256"] == hashlib.sha256(b"").hexdigest()
    assert under_a_file["newest_mtime"] == 0


def test_a_file_swapped_after_the_listing_is_unreadable_not_a_hang(tmp_path: Path) -> None:
    top = make_tree(tmp_path / "data")
    files, unreadable = dataset.dataset_listing(str(top))
    (top / "a.bin").unlink()
    os.mkfifo(top / "a.bin")
    assert files is not None
    others = [rel for rel in SIZES if rel != "a.bin"]  # a.bin comes first: the rest still count
    expected = reference(top, others, deep=True)
    assert dataset.sample_digest(files, unreadable) == expected["sample_sha256"]
    assert unreadable == {"a.bin"}
    again: set[str] = set()
    assert dataset.content_digest(files, again) == expected["content_sha256"]
    assert again == {"a.bin"}


def test_past_the_deadline_what_was_counted_is_incomplete(tmp_path: Path) -> None:
    top = make_tree(tmp_path / "data")
    (tmp_path / "one").write_bytes(b"12345")
    got = dataset.fingerprints({"b": str(top), "a": str(tmp_path / "one")}, seconds=0)
    assert list(got) == ["a", "b"]
    # The walk stops after its first directory (the top's two files); a file, at its sample.
    for name, path, files, size in (("a", tmp_path / "one", 1, 5), ("b", top, 2, 10)):
        answer = got[name]
        seconds = answer.pop("seconds")
        assert isinstance(seconds, float) and 0 <= seconds < 2
        assert answer == {
            "path": str(path),
            "missing": False,
            "incomplete": True,
            "files": files,
            "bytes": size,
        }
    pattern = str(top / "su[b]")
    assert dataset.fingerprints({"g": pattern}, seconds=0)["g"]["files"] == 2  # sub's own two
    assert "incomplete" not in dataset.fingerprints({"b": str(top)}, seconds=60)["b"]
    late = dataset.data_command({"datasets": {"d": str(top)}, "seconds": 0})
    assert late["datasets"]["d"]["incomplete"] is True
    stopped = dataset.OutOfTime([("x", 3, 0, "/x")])
    assert str(stopped) == "out of time" and stopped.found == [("x", 3, 0, "/x")]


def test_the_agent_s_data_command_answers_each_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    top = make_tree(tmp_path / "data")
    answer = dataset.data_command({"datasets": {"d": str(top)}, "deep": 1})
    got = without_seconds(answer["datasets"]["d"])
    assert got == reference(top, list(SIZES), deep=True)
    assert dataset.data_command({}) == {"datasets": {}}
    fast = dataset.fingerprints({"d": str(top)})["d"]
    assert "content_sha256" not in fast and fast["seconds"] < 60
    dataset.data_command({"datasets": {"d": str(top)}})
    assert capsys.readouterr().err == ""  # no progress unless asked


def test_progress_is_said_once_a_directory_and_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    top = make_tree(tmp_path / "data")
    said: list[str] = []

    def say(make: Any, now_anyway: bool = False) -> None:  # a pacer that lets every line by
        said.append(make())

    dataset.dataset_fingerprint(str(top), say=say)
    # Looked at once a directory, with the count so far: the top's 2 files, sub's 2 more,
    # deeper's 1; named by the path walked.
    assert said == [f"listing {top}: {n} files" for n in (2, 4, 5)]
    globbed: list[str] = []
    dataset.dataset_fingerprint(
        str(top / "su?"), say=lambda make, now_anyway=False: globbed.append(make())
    )
    assert globbed == [f"listing {top / 'sub'}: {n} files" for n in (2, 3)]
    dataset.data_command({"datasets": {"d": str(top)}, "progress": True})
    assert "envlock-progress: " in capsys.readouterr().err
    deadline = time.monotonic() + 60
    assert dataset.dataset_fingerprint(str(top), deadline=deadline)["files"] == len(SIZES)


def test_the_sample_is_the_files_of_smallest_crc_in_path_order() -> None:
    import zlib

    files = [(f"f{i:05d}", 1, 0, "") for i in range(dataset.SAMPLE_FILES + 50)]
    chosen = sampled(files)
    crcs = sorted(zlib.crc32(f[0].encode()) for f in files)[: dataset.SAMPLE_FILES]
    assert sorted(zlib.crc32(f[0].encode()) for f in chosen) == crcs
    assert chosen == sorted(chosen)
    assert sampled(files[: dataset.SAMPLE_FILES]) == files[: dataset.SAMPLE_FILES]


def test_names_that_are_not_utf_8_are_fingerprinted_as_their_bytes(tmp_path: Path) -> None:
    top = tmp_path / "data"
    top.mkdir()
    names = [os.fsdecode(b"bad-\xff.bin")] + [f"f{i:04d}" for i in range(dataset.SAMPLE_FILES)]
    for name in names:
        (top / name).write_bytes(name.encode("utf-8", "surrogateescape"))
    got = without_seconds(dataset_fingerprint(str(top), deep=True))
    assert got["files"] == len(names) and got["unreadable"] == 0
    listing = "".join(
        f"{rel}\0{(top / rel).stat().st_size}\0{(top / rel).stat().st_mtime_ns}\n"
        for rel in sorted(names)
    )
    assert (
        got["listing_sha256"]
        == hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()
    )
    total = hashlib.sha256()
    for rel in sorted(names):
        data = (top / rel).read_bytes()
        total.update(
            f"{rel}\0{hashlib.sha256(data).hexdigest()}\n".encode("utf-8", "surrogateescape")
        )
    assert got["content_sha256"] == total.hexdigest()
    # More names than SAMPLE_FILES: the sample is chosen by a CRC of each name's bytes too.
    assert got["sample_sha256"]


def test_a_glob_is_listed_from_before_its_first_magic_character(tmp_path: Path) -> None:
    top = make_tree(tmp_path / "data")
    for pattern in ("su?/dee?er/c.bin", "[s]ub/[d]eeper/c.bin", "s*/d*/c.bin"):
        got = without_seconds(dataset_fingerprint(str(top / pattern)))
        assert got == {**reference(top, ["sub/deeper/c.bin"]), "path": str(top / pattern)}
    (top / "gone.bin").symlink_to(tmp_path / "nothing")  # a dangling match: named
    got = dataset_fingerprint(str(top / "*.bin"))
    assert got["files"] == 1 and got["unreadable_named"] == ["gone.bin"]
