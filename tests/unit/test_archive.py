"""The compile-cache archive's member checks (agent/cache.py), on real tar members and files.

A cache archive comes from another machine: no member may land outside the cache dir, be a
link or a device, or make the restore follow a symlink planted inside the dir.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from envlock.agent.cache import (
    ARCHIVE_META,
    archive_meta,
    differing_parts,
    inside,
    safe_member,
    write_member,
)
from envlock.agent.core import AgentError


def member(name: str, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    return info


SAFE = [
    ("cache/a", "a"),
    ("cache/inductor/fx/ab.pkl", "inductor/fx/ab.pkl"),
    ("cache//x", "x"),
    ("cache/./x", "x"),
    ("cache/a/../b", "b"),
    ("cache/X/Y", "X/Y"),  # only the one slash after "cache" is dropped
]
ESCAPING = [
    "cache/../etc/passwd",
    "cache/../../x",
    "cache/a/../../x",
    "cache/..",
    "cache",
    "cache/",
    "cache/.",
    "/cache/x",
    "/etc/passwd",
    "../cache/x",
    "cachex/y",
    "other/x",
    "x",
    "",
]


@pytest.mark.parametrize(("name", "rel"), SAFE)
def test_members_under_cache_are_restored_at_their_relative_path(name: str, rel: str) -> None:
    assert safe_member(member(name)) == rel
    assert safe_member(member(name, tarfile.DIRTYPE)) == rel


@pytest.mark.parametrize("name", ESCAPING)
def test_members_that_could_escape_or_name_the_dir_itself_are_skipped(name: str) -> None:
    assert safe_member(member(name)) is None


@pytest.mark.parametrize(
    "kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE]
)
def test_links_and_devices_are_never_restored(kind: bytes) -> None:
    assert safe_member(member("cache/x", kind)) is None


def test_a_path_inside_the_cache_dir_passes(tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    (dest / "a" / "b").mkdir(parents=True)
    real = os.path.realpath(dest)
    inside(real, str(dest))
    inside(real, str(dest / "a" / "b"))


def test_a_symlink_planted_inside_the_dir_cannot_carry_the_restore_out(tmp_path: Path) -> None:
    dest = tmp_path / "cache"
    dest.mkdir()
    (tmp_path / "outside").mkdir()
    (dest / "planted").symlink_to(tmp_path / "outside")
    (tmp_path / "cache-sibling").mkdir()  # shares the dir's name as a prefix
    real = os.path.realpath(dest)
    with pytest.raises(AgentError, match="leads outside the cache dir") as info:
        inside(real, str(dest / "planted"))
    assert info.value.kind == "archive"
    with pytest.raises(AgentError, match="leads outside"):
        inside(real, str(tmp_path / "cache-sibling"))
    with pytest.raises(AgentError, match="leads outside"):
        inside(real, str(tmp_path))


def test_a_member_is_written_beside_its_target_never_through_a_link(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "entry"
    # A link at the old temp name and one at the target: neither is followed, and the link
    # at the target is not replaced either (only regular files are).
    (tmp_path / "entry.envlock-tmp").symlink_to(victim)
    target.symlink_to(victim)
    with pytest.raises(AgentError, match="not a regular file"):
        write_member(io.BytesIO(b"restored"), str(target))
    assert victim.read_text() == "untouched" and target.is_symlink()
    write_member(io.BytesIO(b"restored"), str(tmp_path / "plain"))
    assert (tmp_path / "plain").read_bytes() == b"restored"
    write_member(None, str(tmp_path / "empty"))
    assert (tmp_path / "empty").read_bytes() == b""
    assert (tmp_path / "empty").stat().st_mode & 0o777 == 0o644 & ~current_umask()


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def archive_with(first: tuple[str, bytes] | None, kind: bytes = tarfile.REGTYPE) -> tarfile.TarFile:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as out:
        if first is not None:
            info = tarfile.TarInfo(first[0])
            info.type = kind
            info.size = len(first[1]) if kind == tarfile.REGTYPE else 0
            out.addfile(info, io.BytesIO(first[1]) if kind == tarfile.REGTYPE else None)
    buffer.seek(0)
    return tarfile.open(fileobj=buffer, mode="r")


def meta(document: object) -> bytes:
    return json.dumps(document).encode()


def test_the_metadata_member_gives_the_fingerprint_parts() -> None:
    parts = {"torch": "2.11.0+cu128", "python": "3.11"}
    archive = archive_with((ARCHIVE_META, meta({"fingerprint": {"parts": parts}})))
    assert archive_meta(archive, archive.next()) == parts


@pytest.mark.parametrize(
    ("first", "kind", "message"),
    [
        (None, tarfile.REGTYPE, "no envlock-cache.json first"),
        (("cache/x", b"{}"), tarfile.REGTYPE, "no envlock-cache.json first"),
        ((ARCHIVE_META, b""), tarfile.DIRTYPE, "no envlock-cache.json first"),
        ((ARCHIVE_META, b"not json"), tarfile.REGTYPE, "is not envlock's metadata"),
        ((ARCHIVE_META, b"\xff\xfe"), tarfile.REGTYPE, "is not envlock's metadata"),
        ((ARCHIVE_META, meta([1])), tarfile.REGTYPE, "is not envlock's metadata"),
        ((ARCHIVE_META, meta({"fingerprint": 1})), tarfile.REGTYPE, "not envlock's metadata"),
        ((ARCHIVE_META, meta({"fingerprint": {}})), tarfile.REGTYPE, "not envlock's metadata"),
        (
            (ARCHIVE_META, meta({"fingerprint": {"parts": []}})),
            tarfile.REGTYPE,
            "not envlock's metadata",
        ),
    ],
)
def test_anything_else_first_is_not_a_cache_archive(
    first: tuple[str, bytes] | None, kind: bytes, message: str
) -> None:
    archive = archive_with(first, kind)
    with pytest.raises(AgentError, match=message) as info:
        archive_meta(archive, archive.next())
    assert info.value.kind == "archive"


def test_an_oversized_metadata_member_is_refused_unread() -> None:
    archive = archive_with((ARCHIVE_META, b" " * ((1 << 20) + 1)))
    with pytest.raises(AgentError, match=r"no envlock-cache\.json first"):
        archive_meta(archive, archive.next())
    exact = archive_with((ARCHIVE_META, meta({"fingerprint": {"parts": {}}}).ljust(1 << 20)))
    assert archive_meta(exact, exact.next()) == {}


def test_differing_parts_name_each_key_on_either_side() -> None:
    assert differing_parts({"a": 1, "b": 2}, {"a": 1, "b": 2}) == []
    assert differing_parts({"a": 1, "b": 2}, {"b": 3, "c": 4}) == [
        "a: archive has 1, this build has None",
        "b: archive has 2, this build has 3",
        "c: archive has None, this build has 4",
    ]
