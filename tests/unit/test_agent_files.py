"""The agent's file checks and its switch, on real files: verify_files against a manifest, with
edits made to hide from a stat comparison, and the `current` link under a concurrent reader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlock.agent import files as agent_files
from envlock.agent.apply import do_switch
from envlock.agent.core import GENERATION, symlink_atomic
from envlock.agent.files import verify_files, write_manifest
from envlock.agent.statindex import MAGIC, STAT_INDEX, fast_scan, read_stat_index

SITE = "lib/python3.11/site-packages"


def make_venv(root: Path) -> Path:
    """A venv-shaped tree: one package with a RECORD, one file no RECORD covers."""
    venv = root / "venv"
    pkg = venv / SITE / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text("VALUE = 1\n")
    (pkg / "data.bin").write_bytes(b"0123456789" * 10)
    info = venv / SITE / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(
        f"pkg/mod.py,sha256={record_hash(pkg / 'mod.py')},10\npkg-1.0.dist-info/RECORD,,\n"
    )
    (venv / "bin").mkdir()
    (venv / "bin" / "activate").write_text("# activate\n")
    write_manifest(str(venv))
    return venv


def record_hash(path: Path) -> str:
    import base64
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def rewrite_keeping_mtime(path: Path, data: bytes) -> None:
    """Write new content in place and set mtime back: what user space can hide."""
    st = path.stat()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def modified(report: dict[str, Any]) -> list[str]:
    return [item["path"] for item in report["modified"]]


def test_an_untouched_venv_verifies_clean_fast_and_deep(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    for deep in (False, True):
        report = verify_files(str(venv), deep=deep)
        assert (report["modified"], report["missing"], report["added"]) == ([], [], [])
        assert report["checked"] == 4 and report["deep"] is deep


def test_deep_hashes_every_file_and_finds_a_same_size_same_mtime_edit(tmp_path: Path) -> None:
    """The edit keeps size and mtime, and a hard link made beside it moves the link count with
    the ctime (as uv hardlinking from its cache does): no stat field betrays it, so only
    hashing every file finds it."""
    venv = make_venv(tmp_path)
    for rel, data in ((f"{SITE}/pkg/mod.py", b"VALUE = 2\n"), ("bin/activate", b"# evil!!!\n")):
        path = venv / rel
        rewrite_keeping_mtime(path, data)
        os.link(path, tmp_path / path.name)
    report = verify_files(str(venv), deep=True)
    assert modified(report) == ["bin/activate", f"{SITE}/pkg/mod.py"]
    why = {item["path"]: item["why"] for item in report["modified"]}
    assert why == {
        "bin/activate": "content differs from the build",
        f"{SITE}/pkg/mod.py": "content differs from the wheel's RECORD",
    }
    dists = {item["path"]: item["dist"] for item in report["modified"]}
    assert dists == {"bin/activate": "", f"{SITE}/pkg/mod.py": "pkg"}


def test_the_fast_check_compares_sizes(tmp_path: Path) -> None:
    """A grown file with mtime set back and its link count moved (so the ctime rule, which
    excuses uv's hard links, does not apply): only its size gives it away."""
    venv = make_venv(tmp_path)
    path = venv / SITE / "pkg" / "data.bin"
    rewrite_keeping_mtime(path, path.read_bytes() + b"!")
    os.link(path, tmp_path / "elsewhere")
    report = verify_files(str(venv))
    assert modified(report) == [f"{SITE}/pkg/data.bin"]
    assert report["modified"][0]["why"] == "content differs from the build"
    assert report["modified"][0]["links"] == 2


def test_the_fast_check_sees_a_same_size_edit_by_its_ctime(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    rewrite_keeping_mtime(venv / "bin" / "activate", b"# evil!!!\n")
    assert modified(verify_files(str(venv))) == ["bin/activate"]


def test_a_file_replaced_by_another_inode_is_checked_by_content(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    path = venv / SITE / "pkg" / "data.bin"
    st = path.stat()
    same = tmp_path / "same"
    same.write_bytes(path.read_bytes())
    os.utime(same, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(same, path)
    assert verify_files(str(venv))["modified"] == []  # same bytes: no false alarm
    other = tmp_path / "other"
    other.write_bytes(b"9" * st.st_size)
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, path)
    assert modified(verify_files(str(venv))) == [f"{SITE}/pkg/data.bin"]


def linked_and_unlinked(venv: Path, *rels: str) -> None:
    """What another venv hardlinked from uv's cache and then removed leaves: each file's link
    count where it was, its ctime moved."""
    for rel in rels:
        other = venv.parent / "other-venv-link"
        os.link(venv / rel, other)
        other.unlink()


def suspects(venv: Path) -> list[str]:
    index = read_stat_index(str(venv))
    assert index is not None
    return sorted(suspect[0] for suspect in fast_scan(str(venv), index)[0])


MOD, DATA = f"{SITE}/pkg/mod.py", f"{SITE}/pkg/data.bin"


def test_a_ctime_moved_by_another_venvs_link_is_hashed_once_then_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without this every later fast check hashed those files again: a sibling venv built
    and removed from the same uv cache made a 16k-file check 0.15 s -> 0.8 s for good."""
    monkeypatch.setattr(agent_files, "SETTLED_NS", 0, raising=False)
    venv = make_venv(tmp_path)
    linked_and_unlinked(venv, MOD, DATA)
    assert suspects(venv) == [DATA, MOD]
    assert verify_files(str(venv))["modified"] == []  # hashed: unchanged, and recorded
    assert suspects(venv) == []
    assert verify_files(str(venv))["modified"] == []
    # What the index now records is still a tripwire: an edit that keeps mtime is seen.
    rewrite_keeping_mtime(venv / DATA, b"9" * 100)
    assert modified(verify_files(str(venv))) == [DATA]
    assert modified(verify_files(str(venv))) == [DATA]  # never recorded as fine


def test_only_the_unchanged_ones_are_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_files, "SETTLED_NS", 0, raising=False)
    venv = make_venv(tmp_path)
    linked_and_unlinked(venv, MOD)
    rewrite_keeping_mtime(venv / DATA, b"9" * 100)  # same size, mtime set back: ctime moved
    assert modified(verify_files(str(venv))) == [DATA]
    assert suspects(venv) == [DATA]


def test_a_ctime_as_young_as_the_scan_is_not_recorded(tmp_path: Path) -> None:
    """A change made after the scan's lstat within the same clock tick would show the same
    ctime: only a ctime older than the scan by SETTLED_NS is recorded."""
    venv = make_venv(tmp_path)
    linked_and_unlinked(venv, MOD)
    assert verify_files(str(venv))["modified"] == []
    assert suspects(venv) == [MOD]


def test_an_index_it_may_not_replace_leaves_the_check_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Best effort: the index is replaced only as write_atomic replaces a regular file."""
    monkeypatch.setattr(agent_files, "SETTLED_NS", 0, raising=False)
    venv = make_venv(tmp_path)
    index = venv / STAT_INDEX
    kept = tmp_path / "kept-index"
    os.replace(index, kept)
    index.symlink_to(kept)
    linked_and_unlinked(venv, MOD)
    assert verify_files(str(venv))["modified"] == []
    assert index.is_symlink() and suspects(venv) == [MOD]


def test_a_touched_file_with_the_same_content_is_not_reported(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    os.utime(venv / SITE / "pkg" / "mod.py", ns=(1, 1))
    assert verify_files(str(venv))["modified"] == []


def test_missing_and_added_files(tmp_path: Path) -> None:
    venv = make_venv(tmp_path)
    (venv / SITE / "pkg" / "mod.py").unlink()
    (venv / SITE / "evil.pth").write_text("import os\n")
    (venv / SITE / "newpkg").mkdir()
    (venv / SITE / "newpkg" / "x.py").write_text("")
    report = verify_files(str(venv))
    assert report["missing"] == [{"path": f"{SITE}/pkg/mod.py", "dist": "pkg"}]
    assert report["added"] == [
        {"path": f"{SITE}/evil.pth", "pth": True, "dist": ""},
        {"path": f"{SITE}/newpkg/x.py", "pth": False, "dist": ""},
    ]


def test_a_venv_without_a_manifest_says_so(tmp_path: Path) -> None:
    assert verify_files(str(tmp_path)) == {"error": "no manifest"}


# -- the stat index (what the fast check reads) --------------------------------------------


def pollute(venv: Path) -> None:
    """One of each change: a file gone, a .pth added, a new package dir, a file added in an
    empty directory and one three levels below an untouched directory."""
    (venv / SITE / "pkg" / "mod.py").unlink()
    (venv / SITE / "evil.pth").write_text("import os\n")
    (venv / SITE / "newpkg").mkdir()
    (venv / SITE / "newpkg" / "x.py").write_text("")
    (venv / "share" / "empty" / "dropped.so").write_bytes(b"\x7fELF")
    (venv / "deep" / "a" / "b" / "c" / "hook.py").write_text("")


POLLUTED = {
    "missing": [{"path": f"{SITE}/pkg/mod.py", "dist": "pkg"}],
    "added": [
        "deep/a/b/c/hook.py",
        f"{SITE}/evil.pth",
        f"{SITE}/newpkg/x.py",
        "share/empty/dropped.so",
    ],
}


def make_tree(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    make_venv(tmp_path)
    (venv / "share" / "empty").mkdir(parents=True)
    (venv / "deep" / "a" / "b" / "c").mkdir(parents=True)
    (venv / "deep" / "top.txt").write_text("x")
    write_manifest(str(venv))
    return venv


def observed(report: dict[str, Any]) -> dict[str, Any]:
    return {"missing": report["missing"], "added": [item["path"] for item in report["added"]]}


def test_write_manifest_writes_a_stat_index_of_every_file_and_directory(tmp_path: Path) -> None:
    venv = make_tree(tmp_path)
    index = read_stat_index(str(venv))
    assert index is not None
    header, dirs, names, _numbers = index
    assert header["files"] == len(names) == 5
    assert "" in dirs and "share/empty" in dirs and "deep/a/b/c" in dirs
    assert ".envlock" not in dirs
    assert not any(name.endswith(".tmp") for name in os.listdir(venv / ".envlock"))


def test_the_index_and_the_manifest_find_the_same_changes(tmp_path: Path) -> None:
    venv = make_tree(tmp_path)
    pollute(venv)
    with_index = verify_files(str(venv))
    (venv / STAT_INDEX).unlink()
    assert observed(with_index) == observed(verify_files(str(venv))) == POLLUTED
    assert with_index["checked"] == 5


def test_a_damaged_index_falls_back_to_the_manifest(tmp_path: Path) -> None:
    venv = make_tree(tmp_path)
    pollute(venv)
    data = (venv / STAT_INDEX).read_bytes()
    for damaged in (data[: len(data) // 2], b"", MAGIC + b"{not json\n", b"other" + data):
        (venv / STAT_INDEX).write_bytes(damaged)
        assert read_stat_index(str(venv)) is None
        assert observed(verify_files(str(venv))) == POLLUTED


def test_a_directory_removed_or_swapped_for_a_link_is_reported(tmp_path: Path) -> None:
    venv = make_tree(tmp_path)
    pkg = venv / SITE / "pkg"
    moved = tmp_path / "pkg-moved"
    pkg.rename(moved)
    report = verify_files(str(venv))
    assert [item["path"] for item in report["missing"]] == [
        f"{SITE}/pkg/data.bin",
        f"{SITE}/pkg/mod.py",
    ]
    # The same files back behind a symlink: the same inodes, so nothing to report, and the
    # fast check reads them through the link rather than failing on it.
    pkg.symlink_to(moved)
    assert (verify_files(str(venv))["missing"], verify_files(str(venv))["modified"]) == ([], [])


def rewrite_header(venv: Path, **changes: Any) -> None:
    data = (venv / STAT_INDEX).read_bytes()
    end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC) : end])
    header.update(changes)
    (venv / STAT_INDEX).write_bytes(MAGIC + json.dumps(header).encode() + data[end:])


def test_directories_as_young_as_the_index_are_always_listed(tmp_path: Path) -> None:
    """A coarse clock can give a directory changed right after the index the ctime it had:
    those changed in the index's own clock tick are listed whatever their stat says. Here the
    directory's recorded stat is made to match its changed one, as such a clock would."""
    venv = make_tree(tmp_path)
    (venv / "share" / "empty" / "dropped.so").write_bytes(b"")
    st = os.lstat(venv / "share" / "empty")
    _header, dirs, _names, numbers = read_stat_index(str(venv)) or ({}, [], [], [])
    k = dirs.index("share/empty")
    numbers[5 * k + 2 : 5 * k + 5] = type(numbers)("q", [st.st_ino, st.st_mtime_ns, st.st_ctime_ns])
    data = (venv / STAT_INDEX).read_bytes()
    (venv / STAT_INDEX).write_bytes(data[: len(data) - len(numbers) * 8] + numbers.tobytes())
    rewrite_header(venv, sealed=st.st_ctime_ns + 1)  # older than the index: trusted, skipped
    assert observed(verify_files(str(venv)))["added"] == []
    rewrite_header(venv, sealed=st.st_ctime_ns)  # the same tick: listed
    assert observed(verify_files(str(venv)))["added"] == ["share/empty/dropped.so"]


def test_an_index_whose_directories_do_not_add_up_is_not_read(tmp_path: Path) -> None:
    venv = make_tree(tmp_path)
    pollute(venv)
    _header, dirs, _names, numbers = read_stat_index(str(venv)) or ({}, [], [], [])
    data = (venv / STAT_INDEX).read_bytes()
    body = data[: len(data) - len(numbers) * 8]
    for k, field, value in ((1, 0, 7), (0, 1, 99), (2, 1, -1)):
        forged = type(numbers)("q", numbers)
        forged[5 * k + field] = value  # a directory's first file or file count
        (venv / STAT_INDEX).write_bytes(body + forged.tobytes())
        assert read_stat_index(str(venv)) is None
        assert observed(verify_files(str(venv))) == POLLUTED
    assert len(dirs) > 2


def test_an_index_from_another_byte_order_is_not_read(tmp_path: Path) -> None:
    venv = make_tree(tmp_path)
    rewrite_header(venv, byteorder="big" if sys.byteorder == "little" else "little")
    assert read_stat_index(str(venv)) is None
    assert verify_files(str(venv))["checked"] == 5


# -- the switch of `current` --------------------------------------------------------------

# Reads the link in a loop until it has seen the target change `changes` times (a count, not
# a duration: it ends as soon as the switches it waits for have happened), printing how many
# reads found no link at all.
READER = """
import os, sys
link, changes = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
failures = seen = 0
last = None
while seen < changes:
    try:
        now = os.readlink(link)
    except OSError:
        failures += 1
        continue
    if now != last:
        seen, last = seen + 1, now
print(failures, flush=True)
"""


def test_current_is_switched_atomically_under_a_concurrent_reader(tmp_path: Path) -> None:
    link = tmp_path / "current"
    targets = ["generations/1-000000000001", "generations/2-000000000002"]
    symlink_atomic(str(link), targets[0])
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(link), "300"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdout.readline() == "ready\n"
    switches = 0
    while reader.poll() is None and switches < 2_000_000:  # bounded, never timed
        switches += 1
        symlink_atomic(str(link), targets[switches % 2])
    assert reader.wait() == 0
    assert reader.stdout.read() == "0\n"
    assert os.readlink(link) in targets
    assert sorted(os.listdir(tmp_path)) == ["current"]  # no temp link left behind


def test_do_switch_moves_current_and_records_history(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for name in ("1-000000000001", "2-000000000002"):
        (root / "generations" / name / ".envlock").mkdir(parents=True)
        (root / "generations" / name / GENERATION).write_text("{}")
    req = {"root": str(root)}
    do_switch(req, {"name": "1-000000000001"})
    do_switch(req, {"name": "2-000000000002", "why": "rollback"})
    assert os.readlink(root / "current") == "generations/2-000000000002"
    assert (root / "hold.json").is_file()
    do_switch(req, {"name": "1-000000000001"})
    assert not (root / "hold.json").exists()
    history = (root / "history.jsonl").read_text().splitlines()
    assert len(history) == 3 and '"from": "2-000000000002"' in history[2]


def test_every_agent_module_is_python_3_8_syntax() -> None:
    """The agent runs on the target's interpreter, which may be as old as 3.8: no syntax
    newer than that, as far as ast's feature_version check sees (walrus, match, …). So do
    the start-up modules, in the user's own Python under `envlock run`, and the trainer
    callbacks that the start-up API exposes there (envlock/integrations)."""
    import ast

    package = Path(__file__).resolve().parents[2] / "envlock"
    modules = [*package.glob("agent/*.py"), *package.glob("startup/**/*.py")]
    modules += package.glob("integrations/*.py")
    for module in sorted(modules):
        ast.parse(module.read_text(), filename=str(module), feature_version=(3, 8))


def test_the_next_writer_removes_the_temp_files_a_crash_left_beside_a_snapshot(
    tmp_path: Path,
) -> None:
    """A crash during `snapshot` leaves `.envlock-snapshot.json.<hex>.tmp` behind; the next
    write into the directory removes it (an hour old), never a live writer's or another file's."""
    from envlock.runs.snapshot_file import write_snapshot

    left = tmp_path / ".envlock-snapshot.json.0123456789ab.tmp"
    live = tmp_path / ".envlock-snapshot.json.ba9876543210.tmp"
    other = tmp_path / ".config.json.0123456789ab.tmp"
    for path in (left, live, other):
        path.write_text("{")
    old = os.stat(left).st_mtime - 2 * 3600
    os.utime(left, (old, old))
    os.utime(other, (old, old))
    write_snapshot(tmp_path, {"schema": 1})
    assert not left.exists() and live.exists() and other.exists()
    assert json.loads((tmp_path / "envlock-snapshot.json").read_text()) == {"schema": 1}
