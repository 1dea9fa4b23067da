"""Dataset fingerprints: what each level sees (listing, sample, deep), and `envlock data`;
every kind of [data] source read, fingerprinted, snapshotted and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from envlock.agent.datanames import DATA_NAME
from envlock.agent.dataset import (
    SAMPLE_BYTES,
    SAMPLE_FILES,
    dataset_fingerprint,
    fingerprints,
    sampled,
)
from envlock.base.tomlread import Table
from envlock.errors import ProfileError
from envlock.profile.read import load_profile
from envlock.profile.sources import KINDS, DataSource, read_sources
from envlock.runs import snapshot_doc
from envlock.runs.diff_data import data_group
from envlock.runs.diff_types import SnapshotRecord
from envlock.runs.environment import run_context
from envlock.runs.snapshot import fingerprint_datasets
from envlock.runs.startup_set import startup_files
from tests.conftest import Envlock


def make_dataset(root: Path, files: int = 40, size: int = 3 * SAMPLE_BYTES) -> Path:
    for i in range(files):
        shard = root / f"shard{i % 4}"
        shard.mkdir(parents=True, exist_ok=True)
        (shard / f"part-{i:05d}.bin").write_bytes(bytes([i % 251]) * size)
    return root


def edit_keeping_size_and_mtime(path: Path, offset: int) -> None:
    """The edit a listing cannot see: same size, mtime put back."""
    st = path.stat()
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"\xff")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_each_level_sees_what_it_reads(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "train")
    before = dataset_fingerprint(str(data), deep=True)
    assert (before["files"], before["bytes"]) == (40, 40 * 3 * SAMPLE_BYTES)
    part = data / "shard0" / "part-00000.bin"
    # In the middle of a file (outside its first and last 64 KiB): only deep sees it.
    edit_keeping_size_and_mtime(part, SAMPLE_BYTES + 10)
    middle = dataset_fingerprint(str(data), deep=True)
    assert middle["listing_sha256"] == before["listing_sha256"]
    assert middle["sample_sha256"] == before["sample_sha256"]
    assert middle["content_sha256"] != before["content_sha256"]
    # In the first 64 KiB of a sampled file: the sample sees it too.
    edit_keeping_size_and_mtime(part, 5)
    head = dataset_fingerprint(str(data), deep=True)
    assert head["listing_sha256"] == before["listing_sha256"]
    assert head["sample_sha256"] != middle["sample_sha256"]
    # A file added: the count and the listing change.
    (data / "shard1" / "part-99999.bin").write_bytes(b"new")
    grown = dataset_fingerprint(str(data))
    assert grown["files"] == 41 and grown["listing_sha256"] != head["listing_sha256"]


def test_the_sample_is_a_fixed_subset_as_files_come_and_go() -> None:
    files = [(f"f{i:06d}", 1, 0, f"/x/f{i:06d}") for i in range(5000)]
    chosen = sampled(files)
    assert len(chosen) == SAMPLE_FILES
    more = sorted([*files, *[(f"g{i:06d}", 1, 0, "") for i in range(100)]])
    kept = {f[0] for f in chosen} - {f[0] for f in sampled(more)}
    assert len(kept) <= 100  # a new file displaces at most one sampled file


def test_missing_links_loops_and_globs(tmp_path: Path) -> None:
    assert dataset_fingerprint(str(tmp_path / "nope")) == {
        "path": str(tmp_path / "nope"),
        "missing": True,
    }
    data = make_dataset(tmp_path / "d", files=3, size=10)
    (data / "dangling").symlink_to(tmp_path / "gone")
    (data / "loop").symlink_to(data / "loop")
    (data / "up").symlink_to(data)  # a link to a directory is not followed
    fp = dataset_fingerprint(str(data))
    assert fp["files"] == 3 and fp["unreadable"] == 2
    assert fp["unreadable_named"] == ["dangling", "loop"]
    globbed = dataset_fingerprint(str(data / "shard*" / "*.bin"))
    assert globbed["files"] == 3
    assert dataset_fingerprint(str(data / "*.none"))["missing"]


@pytest.fixture
def data_profile(tmp_path: Path, envlock: Envlock) -> Path:
    profile = tmp_path / "d.toml"
    assert envlock("init", profile).returncode == 0
    make_dataset(tmp_path / "train", files=5, size=100)
    with profile.open("a") as handle:
        handle.write('\n[data]\ntrain = "train"\n')
    return profile


def test_envlock_data_prints_each_fingerprint(data_profile: Path, envlock: Envlock) -> None:
    result = envlock("data", "--json", data_profile)
    assert result.returncode == 0, result.stderr
    train = json.loads(result.stdout)["datasets"]["train"]
    assert (train["files"], train["bytes"]) == (5, 500)
    assert train["path"] == str(data_profile.parent / "train")
    human = envlock("data", "--deep", data_profile)
    assert human.returncode == 0 and "train: 5 files" in human.stdout and "content" in human.stdout


def test_envlock_data_refuses_what_is_not_there(data_profile: Path, envlock: Envlock) -> None:
    with data_profile.open("a") as handle:
        handle.write('gone = "no-such-dir"\n')
    result = envlock("data", data_profile)
    assert result.returncode == 2 and "no-such-dir does not exist" in result.stdout
    data_profile.write_text(data_profile.read_text() + '"bad name" = "x"\n')
    bad = envlock("data", data_profile)
    assert bad.returncode == 2 and "[data] bad name" in bad.stderr


# -- every kind of [data] source (profile/sources.py), walked through what reads it ---------
def local_path(tmp_path: Path) -> tuple[str, Path]:
    """A [data] value of the path kind and the dataset it names."""
    data = make_dataset(tmp_path / "train", files=5, size=100)
    return '"train"', data


SOURCE_EXAMPLES = {"path": local_path}


def test_every_source_kind_has_an_example() -> None:
    assert set(SOURCE_EXAMPLES) == set(KINDS)
    assert all(kind.example.split(" = ")[0] for kind in KINDS.values())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_source_kind_is_read_fingerprinted_snapshotted_and_compared(
    kind: str, tmp_path: Path, envlock: Envlock
) -> None:
    profile = tmp_path / "d.toml"
    assert envlock("init", profile).returncode == 0
    value, data = SOURCE_EXAMPLES[kind](tmp_path)
    with profile.open("a") as handle:
        handle.write(f"\n[data]\ntrain = {value}\n")
    # Profile reading: a typed source of its kind.
    prof = load_profile(profile)
    source = prof.data["train"]
    assert source.kind == kind and isinstance(source, DataSource)
    # `envlock data`: the agent fingerprints what the row sends it.
    result = envlock("data", "--json", profile)
    assert result.returncode == 0, result.stderr
    fingerprint = json.loads(result.stdout)["datasets"]["train"]
    assert (fingerprint["files"], fingerprint["bytes"]) == (5, 500)
    # A snapshot: `envlock snapshot`'s agent call, and envlock.snapshot()'s inside a run
    # (the run context carries the same request, as JSON).
    ctx = SimpleNamespace(transport=prof.target.transport(), profile=prof)
    taken = fingerprint_datasets(ctx, prof.data)  # type: ignore[arg-type]
    carried = json.loads(json.dumps(run_context(prof, [], "local")["data"]))
    inside = fingerprints(carried)
    assert taken["train"]["listing_sha256"] == inside["train"]["listing_sha256"]
    assert taken["train"]["listing_sha256"] == fingerprint["listing_sha256"]
    # diff: the same data is no change; a file added is one.
    assert data_group(SnapshotRecord(datasets=taken), SnapshotRecord(datasets=inside)).changes == ()
    (data / "shard0" / "new.bin").write_bytes(b"new")
    grown = fingerprint_datasets(ctx, prof.data)  # type: ignore[arg-type]
    changes = data_group(SnapshotRecord(datasets=taken), SnapshotRecord(datasets=grown)).changes
    assert [c.key for c in changes] == ["train"]


NAME_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import envlock  # the startup API: no real envlock is importable in this interpreter
doc = envlock.namespace("doc", envlock.SHARED)
said = {}
for name in json.load(sys.stdin):
    try:
        doc["checked_data"]({name: "/d"})
        said[name] = True
    except ValueError:
        said[name] = False
print(json.dumps(said))
"""
NAMES = ["train", "val-2", "A_b", "x" * 64, "x" * 65, "../x", "-lead", "a b", "a\n", ""]


def test_one_dataset_name_rule_for_the_profile_the_snapshot_and_the_shipped_api(
    tmp_path: Path,
) -> None:
    """[data]'s names, envlock.snapshot(data=…)'s in envlock and in the start-up set's copy
    (run where no envlock is importable) and a snapshot file's schema: one rule."""
    for rel, content in startup_files().items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    api = tmp_path / "startup" / "envlock_api"
    shipped = subprocess.run(
        [sys.executable, "-I", "-S", "-c", NAME_PROBE, str(api)],
        input=json.dumps(NAMES),
        capture_output=True,
        text=True,
        check=True,
    )
    expected = {name: bool(DATA_NAME.fullmatch(name)) for name in NAMES}
    assert json.loads(shipped.stdout) == expected
    assert sum(expected.values()) == 4
    package = Path(snapshot_doc.__file__).parents[1]
    written = [
        p.relative_to(package) for p in package.rglob("*.py") if DATA_NAME.pattern in p.read_text()
    ]
    assert written == [Path("agent/datanames.py")]  # the profile and the snapshot import it
    for name, ok in expected.items():
        table = Table("p.toml", "data", {name: "/d"})
        if ok:
            assert read_sources(table, table.text)[name] == DataSource("path", "/d")
        else:
            with pytest.raises(ProfileError):
                read_sources(table, table.text)
