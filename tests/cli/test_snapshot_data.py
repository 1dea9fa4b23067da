"""What a run read and how fast it went (issue #30): dataset fingerprints and metrics in
snapshots, and `diff` answering the seed's question — why did this run get slower? — on one
screen: the symptom (tok/s) first, then its candidate causes (torch build, data, cache)."""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import envlock as envlock_api
from envlock.agent.dataset import SAMPLE_BYTES, dataset_fingerprint
from envlock.errors import UsageError
from envlock.runs.diff import Side, compare, load_side
from envlock.runs.diff_data import change_text
from envlock.runs.diff_types import SnapshotRecord
from envlock.runs.snapshot_doc import checked_metrics
from envlock.runs.snapshot_schema import validate_snapshot
from tests.checkpoint.test_diff_snapshots import applied_project
from tests.cli.test_data import edit_keeping_size_and_mtime, make_dataset
from tests.conftest import Envlock

SHA_A, SHA_B = "a" * 64, "b" * 64


def fingerprint(files: int, size: int, listing: str, sample: str) -> dict[str, Any]:
    return {
        "path": "/workspace/data/train",
        "missing": False,
        "files": files,
        "bytes": size,
        "newest_mtime": 1.0,
        "listing_sha256": listing,
        "sample_sha256": sample,
        "unreadable": 0,
        "unreadable_named": [],
    }


def side(label: str, **fields: Any) -> Side:
    return Side(label, None, SnapshotRecord.of({"packages": {}, "env": {}, **fields}))


def texts(groups: list[Any]) -> dict[str, dict[str, str | None]]:
    return {g.name: {c.key: change_text(g.name, c) for c in g.changes} for g in groups}


# -- comparing, pure --------------------------------------------------------------------------
def test_the_seed_question_reads_as_symptom_then_causes() -> None:
    a = side(
        "a",
        metrics={"tok_per_s": 20000, "step": 1000},
        config={"lr": 3e-4},
        datasets={
            "train": fingerprint(800_000, 300_200_000_000, SHA_A, SHA_A),
            "val": fingerprint(1000, 1_000_000, SHA_A, SHA_A),
        },
    )
    b = side(
        "b",
        metrics={"tok_per_s": 11600.0, "step": 20},
        config={"lr": 1e-3},
        datasets={"train": fingerprint(1_100_000, 410_800_000_000, SHA_B, SHA_B)},
    )
    groups = compare(a, b)
    assert [g.name for g in groups] == ["metrics", "hyperparameters", "data"]
    assert texts(groups)["metrics"] == {
        "step": "1,000 → 20 (−98%)",
        "tok_per_s": "20,000 → 11,600 (−42%)",
    }
    assert texts(groups)["data"] == {
        "train": "800,000 → 1,100,000 files (+37.5%), 300.2 GB → 410.8 GB; listing changed; "
        "sample content changed",
        "val": "1,000 files, 1.0 MB (only in A)",
    }
    assert not groups[0].counted and groups[2].counted  # the symptom is no difference itself
    # Metrics alone: the runs measured differently, their environments do not differ.
    same = compare(side("a", metrics={"loss": 2.5}), side("b", metrics={"loss": 2.25}))
    assert [(g.name, g.counted) for g in same] == [("metrics", False)]
    assert texts(same)["metrics"] == {"loss": "2.5 → 2.25 (−10%)"}
    # A snapshot of an envlock before #30 recorded no datasets: not "only in B".
    older = compare(side("a"), side("b", datasets={"val": fingerprint(1, 1, SHA_A, SHA_A)}))
    assert older == []


@pytest.mark.parametrize(
    ("a", "b", "said"),
    [
        (fingerprint(3, 30, SHA_A, SHA_A), fingerprint(3, 30, SHA_A, SHA_B), "sample content"),
        (fingerprint(3, 30, SHA_A, SHA_A), fingerprint(3, 30, SHA_B, SHA_A), "listing changed"),
        (
            fingerprint(3, 30, SHA_A, SHA_A),
            {"path": "/workspace/data/train", "missing": True},
            "3 files, 30 B → /workspace/data/train missing",
        ),
        (
            fingerprint(3, 30, SHA_A, SHA_A),
            {"path": "/d", "missing": False, "incomplete": True, "files": 9, "bytes": 90},
            "3 files, 30 B → 9 files, 90 B (incomplete: time limit)",
        ),
    ],
    ids=["sample-only", "listing-only", "missing", "incomplete"],
)
def test_each_dataset_change_is_said(a: dict[str, Any], b: dict[str, Any], said: str) -> None:
    groups = compare(side("a", datasets={"d": a}), side("b", datasets={"d": b}))
    text = texts(groups)["data"]["d"]
    assert text is not None and said in text
    # The same fingerprint read from another place is the same data.
    moved = dict(a, path="/elsewhere", seconds=9.0)
    assert compare(side("a", datasets={"d": a}), side("b", datasets={"d": moved})) == []


# -- what a snapshot accepts ----------------------------------------------------------------
@pytest.mark.parametrize(
    "metrics",
    [
        {"tok_per_s": math.nan},
        {"tok_per_s": math.inf},
        {"tok_per_s": "fast"},
        {"done": True},
        {"bad name": 1},
        {"x" * 65: 1},
        {"big": 2**64},
        {f"m{i}": i for i in range(257)},
        [("tok_per_s", 1)],
    ],
    ids=["nan", "inf", "string", "bool", "space", "long", "big-int", "too-many", "not-a-dict"],
)
def test_metrics_must_be_plain_finite_numbers(metrics: Any) -> None:
    with pytest.raises(ValueError, match="metrics"):
        checked_metrics(metrics)


def test_metrics_keep_their_numbers() -> None:
    assert checked_metrics({"step": 20, "train/loss": Fraction(1, 4)}) == {
        "step": 20,
        "train/loss": 0.25,
    }


@pytest.mark.parametrize(
    ("field", "value", "names"),
    [
        ("metrics", {"tok_per_s": math.nan}, "metrics.tok_per_s: expected a finite number"),
        ("metrics", {"tok_per_s": "20k"}, "metrics.tok_per_s: expected a number"),
        ("metrics", {"a b": 1}, "expected a metric name"),
        ("datasets", {"train": {"path": "/d"}}, "datasets.train.missing: expected a value"),
        ("datasets", {"train": dict(fingerprint(1, 1, SHA_A, SHA_A), files="many")}, "files"),
        ("datasets", {"train": dict(fingerprint(1, 1, SHA_A, "zz"))}, "expected a sha256"),
        ("datasets", {"../x": {"path": "/d", "missing": True}}, "expected a dataset name"),
    ],
)
def test_a_snapshot_read_back_checks_metrics_and_datasets(
    field: str, value: Any, names: str
) -> None:
    doc = {"schema": 1, "profile": {"name": "p"}, "lock": {"text": ""}, field: value}
    with pytest.raises(UsageError, match=re.escape(names)):
        validate_snapshot(json.loads(json.dumps(doc)), "snap.json")


def test_a_snapshot_fingerprint_is_bounded_in_time(tmp_path: Path) -> None:
    data = make_dataset(tmp_path / "d", files=8, size=10)
    fp = dataset_fingerprint(str(data), deadline=0.0)  # long past
    assert fp["incomplete"] and "listing_sha256" not in fp and fp["files"] <= 8


# -- through the CLI and the Python APIs, for real ----------------------------------------------
TRAIN = """\
import sys
import envlock

ckpt, tok_per_s, step, val = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
envlock.snapshot(ckpt, config={"lr": 3e-4}, data={"val": val[0]} if val else None,
                 metrics={"tok_per_s": tok_per_s, "step": step})
"""


def with_data(profile: Path, data: Path) -> Path:
    with profile.open("a") as handle:
        handle.write(f'\n[data]\ntrain = "{data}"\ngone = "/nonexistent/envlock-data"\n')
    return profile


def test_diff_answers_why_the_run_got_slower(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    """Run A (cu128, warm compile cache) at 20,000 tok/s; the dataset grows and one of its
    files is edited in place; run B (cu130, cold cache) at 11,600 tok/s, at step 20."""
    data = make_dataset(tmp_path / "train", files=12, size=3 * SAMPLE_BYTES)
    a = with_data(applied_project(tmp_path / "a", wheelhouse, envlock), data)
    b = with_data(applied_project(tmp_path / "b", wheelhouse, envlock, backend="cu130"), data)
    (tmp_path / "train.py").write_text(TRAIN)
    cache = next((tmp_path / "a" / "root" / "cache").iterdir()) / "inductor" / "kernel.bin"
    cache.write_bytes(b"\0" * 3_000_000)
    ran = envlock(
        "run", a, "--", "python", "train.py", "ckpt-a", "20000", "1000", data / "shard0",
        cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    for i in range(4):
        (data / "shard3" / f"new-{i}.bin").write_bytes(b"n" * SAMPLE_BYTES)
    edit_keeping_size_and_mtime(data / "shard1" / "part-00001.bin", 5)
    # B through envlock's own Python API, as a script outside `envlock run` writes it.
    envlock_api.snapshot(
        tmp_path / "ckpt-b", b, config={"lr": 3e-4}, metrics={"tok_per_s": 11600, "step": 20}
    )

    result = envlock("diff", "--json", tmp_path / "ckpt-a", tmp_path / "ckpt-b")
    assert result.returncode == 1, result.stderr
    groups = {g["name"]: g for g in json.loads(result.stdout)["groups"]}
    assert list(groups) == ["metrics", "torch build", "data", "compile cache"]
    metrics = {c["key"]: (c["a"], c["b"]) for c in groups["metrics"]["changes"]}
    assert metrics == {"step": (1000, 20), "tok_per_s": (20000, 11600)}
    train, val = groups["data"]["changes"]
    assert (train["key"], train["a"]["files"], train["b"]["files"]) == ("train", 12, 16)
    assert (val["key"], val["kind"], val["a"]["files"]) == ("val", "removed", 3)

    human = envlock("diff", tmp_path / "ckpt-a", tmp_path / "ckpt-b").stdout
    lines = [re.sub(r"\s+", " ", line).strip() for line in human.splitlines()]
    expected = [
        "tok_per_s 20,000 → 11,600 (−42%)",
        "torch 2.11.0+cu128 → 2.11.0+cu130",
        "train 12 → 16 files (+33.3%), 2.4 MB → 2.6 MB; listing changed; sample content changed",
        "val 3 files, 589.8 kB (only in A)",
        "compile cache warm (3.0 MB) → cold",
    ]
    assert [line for line in lines if line in expected] == expected  # in this order
    # The Python side of diff reads the same.
    api = compare(load_side(str(tmp_path / "ckpt-a")), load_side(str(tmp_path / "ckpt-b")))
    assert [g.name for g in api] == list(groups)


def test_every_snapshot_path_records_the_same_fingerprint(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    """`envlock data`, `envlock snapshot --metric`, `run --snapshot-into` and the in-process
    API agree on the dataset; a path not there is recorded as missing, not refused."""
    data = make_dataset(tmp_path / "train", files=6, size=100)
    profile = with_data(applied_project(tmp_path / "p", wheelhouse, envlock), data)
    metrics = ("--metric", "tok_per_s=11600.5", "--metric", "step=20")
    cli = envlock("snapshot", profile, tmp_path / "cli", *metrics)
    assert cli.returncode == 0, cli.stderr
    into = envlock("run", profile, "--snapshot-into", tmp_path / "into", "--", "true")
    assert into.returncode == 0, into.stderr
    (tmp_path / "train.py").write_text(TRAIN)
    inside = envlock("run", profile, "--", "python", "train.py", "api", "1", "2", cwd=tmp_path)
    assert inside.returncode == 0, inside.stderr
    shown = json.loads(envlock("data", "--json", profile).stdout)["datasets"]
    for where in ("cli", "into", "api"):
        snap = json.loads((tmp_path / where / "envlock-snapshot.json").read_text())
        assert snap["datasets"]["gone"] == {"path": "/nonexistent/envlock-data", "missing": True}
        for key in ("files", "bytes", "listing_sha256", "sample_sha256"):
            assert snap["datasets"]["train"][key] == shown["train"][key], (where, key)
    cli_doc = json.loads((tmp_path / "cli" / "envlock-snapshot.json").read_text())
    assert cli_doc["metrics"] == {"step": 20, "tok_per_s": 11600.5}
    for bad in ("tok_per_s=nan", "tok_per_s", "a b=1"):
        refused = envlock("snapshot", profile, tmp_path / "bad", "--metric", bad)
        assert refused.returncode == 2 and "--metric" in refused.stderr, refused.stderr
    assert not (tmp_path / "bad").exists()
