"""The pure parts of `envlock diff` (issue #26): which checkpoint a directory means, the
generic comparison of two run descriptions, each value reported once, one secret rule."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envlock.base.secrets import redact
from envlock.checkpoint.choose import choose_checkpoint
from envlock.cli import cli
from envlock.errors import UsageError
from envlock.runs.describe import Checkpoint, Side, load_side
from envlock.runs.diff import compare, incomplete
from envlock.runs.diff_types import RecordedTorch, SnapshotRecord


def touch(path: Path, mtime: float | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


# -- which checkpoint a directory means ---------------------------------------------------------
def test_step_number_before_mtime(tmp_path: Path) -> None:
    touch(tmp_path / "step9.pt", mtime=3)
    newest = touch(tmp_path / "step20.pt", mtime=1)
    touch(tmp_path / "step10.pt", mtime=2)
    choice = choose_checkpoint(tmp_path)
    assert choice is not None and choice.path == newest
    assert [p.name for p in choice.candidates] == ["step20.pt", "step10.pt", "step9.pt"]
    assert "the newest of 3 by step number" in choice.describe()


def test_without_step_numbers_the_newest_by_mtime(tmp_path: Path) -> None:
    touch(tmp_path / "best" / "model.safetensors")
    touch(tmp_path / "last" / "model.safetensors")
    os.utime(tmp_path / "best", (1, 1))
    os.utime(tmp_path / "last", (9, 9))
    choice = choose_checkpoint(tmp_path)
    assert choice is not None and choice.path == tmp_path / "last"


def test_shards_and_parts_are_one_checkpoint(tmp_path: Path) -> None:
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                 "model.safetensors.index.json", "config.json"):  # fmt: skip
        touch(tmp_path / "pretrained" / name)
    for name in ("model.safetensors", "optimizer.pt", "rng_state.pth", "scheduler.pt"):
        touch(tmp_path / "trainer" / name)
    for name in ("pretrained", "trainer"):
        choice = choose_checkpoint(tmp_path / name)
        assert choice is not None and choice.path == tmp_path / name and not choice.candidates


def test_trainer_output_dir_means_its_newest_checkpoint(tmp_path: Path) -> None:
    touch(tmp_path / "checkpoint-10" / "model.safetensors", mtime=1)
    touch(tmp_path / "checkpoint-9" / "model.safetensors", mtime=5)
    touch(tmp_path / "runs" / "events.out")  # logs: not a checkpoint
    choice = choose_checkpoint(tmp_path)
    assert choice is not None and choice.path == tmp_path / "checkpoint-10"
    assert [p.name for p in choice.candidates] == ["checkpoint-10", "checkpoint-9"]


def test_one_file_beside_a_snapshot_is_read_as_itself_by_diff(tmp_path: Path) -> None:
    pt = touch(tmp_path / "step10.pt")
    touch(tmp_path / "envlock-snapshot.json")
    touch(tmp_path / "config.json")  # a run file: read as one, not a weights member
    assert choose_checkpoint(tmp_path, single=True).path == pt  # type: ignore[union-attr]
    assert choose_checkpoint(tmp_path).path == tmp_path  # type: ignore[union-attr]


def test_a_snapshot_alone_is_no_checkpoint(tmp_path: Path) -> None:
    touch(tmp_path / "envlock-snapshot.json")
    assert choose_checkpoint(tmp_path) is None


# -- comparing descriptions ---------------------------------------------------------------------
def ckpt(tensors: dict[str, str], params: int, **fields: Any) -> Checkpoint:
    defaults: dict[str, Any] = {"config": {}, "optimizer": {}, "progress": {}, "files": ()}
    return Checkpoint("ck.pt", tensors, params, **{**defaults, **fields})


def side(checkpoint: Checkpoint | None = None, **fields: Any) -> Side:
    snapshot = SnapshotRecord.of({"packages": {}, "env": {}, **fields}) if fields else None
    return Side("x", None, snapshot, checkpoint=checkpoint)


def groups(a: Side, b: Side) -> dict[str, dict[str, Any]]:
    return {g.name: {c.key: (c.a, c.b) for c in g.changes} for g in compare(a, b)}


def test_different_models_without_configs_differ_in_structure() -> None:
    a = side(ckpt({"w": "float32 [4, 2]", "b": "float32 [4]"}, 12))
    b = side(ckpt({"w": "float32 [3, 2]", "v": "float16 [4]"}, 10))
    assert groups(a, b) == {
        "structure": {
            "parameters": (12, 10),
            "w": ("float32 [4, 2]", "float32 [3, 2]"),
            "b": ("float32 [4]", None),
            "v": (None, "float16 [4]"),
        }
    }


def test_a_config_on_one_side_only_is_shown_as_such() -> None:
    opt = {"optimizer_state_dict": {"param_groups.0": {"lr": 3e-4, "betas": [0.9, 0.95]}}}
    a = side(ckpt({}, 0, config={"args": {"lr": 3e-4}}, optimizer=opt, progress={"step": 10}))
    b = side(ckpt({}, 0))
    found = groups(a, b)
    assert found["hyperparameters"] == {
        "checkpoint.args.lr": (3e-4, None),
        "checkpoint.optimizer_state_dict.param_groups.0.lr": (3e-4, None),
        "checkpoint.optimizer_state_dict.param_groups.0.betas": ([0.9, 0.95], None),
    }
    assert found["progress"] == {"step": (10, None)}
    kinds = {c.kind for g in compare(a, b) for c in g.changes}
    assert kinds == {"removed"}


def test_a_checkpoint_on_one_side_only_is_a_difference() -> None:
    found = groups(side(ckpt({"w": "float32 [2]"}, 2), env={}), side(env={}))
    assert found == {"structure": {"checkpoint": ("ck.pt (1 tensors)", None)}}


def test_a_lock_has_no_config_to_compare() -> None:
    lock_side = Side("lock", None)
    assert not lock_side.is_run
    assert compare(lock_side, side(config={"lr": 0.1})) == []


def test_each_value_is_reported_once() -> None:
    a = side(ckpt({}, 0, config={"args": {"lr": 3e-4, "warmup": 10}}), config={"lr": 3e-4})
    b = side(ckpt({}, 0, config={"args": {"lr": 1e-3, "warmup": 20}}), config={"lr": 1e-3})
    (hyper,) = [g for g in compare(a, b) if g.name == "hyperparameters"]
    assert [(c.key, c.also) for c in hyper.changes] == [
        ("checkpoint.args.warmup", ()),
        ("run.lr", ("checkpoint.args.lr",)),
    ]
    # Two sources that disagree are two values: both shown.
    c = side(ckpt({}, 0, config={"args": {"lr": 5e-4, "warmup": 10}}), config={"lr": 1e-3})
    (hyper,) = [g for g in compare(a, c) if g.name == "hyperparameters"]
    assert {ch.key for ch in hyper.changes} == {"run.lr", "checkpoint.args.lr"}


@pytest.mark.parametrize("where", ["checkpoint", "run file", "snapshot"])
def test_one_secret_rule_on_every_source(where: str) -> None:
    values = {"token_budget": 1000, "bos_token_id": 1, "eos_token_id": 2, "hf_token": "hf_x"}
    if where == "checkpoint":
        s = side(ckpt({}, 0, config={"config": values}))
    elif where == "run file":
        s = Side("x", None, run_files={"config.json": values})
    else:
        s = side(config=values)
    config = s.config()
    shown = {k.rsplit(".", 1)[-1].rsplit(" ", 1)[-1]: v for k, v in config.items()}
    assert shown == {**values, "hf_token": redact("hf_x")}


def test_what_was_not_read_is_listed_per_side() -> None:
    a = Side("a", None, unread=("a/step20.pt: truncated",))
    assert incomplete(a, Side("b", None)) == ["A: a/step20.pt: truncated"]


def test_run_files_alone_are_read_as_run_files(tmp_path: Path) -> None:
    """A directory of config.json only has no weights to read: nothing unread, its values
    compared; a corrupt weights file beside it is listed as unread."""
    (tmp_path / "config.json").write_text('{"hidden_size": 64, "hf_token": "hf_x"}')
    found = load_side(str(tmp_path))
    assert found.checkpoint is None and found.unread == ()
    assert found.config() == {
        "config.json: hidden_size": 64,
        "config.json: hf_token": redact("hf_x"),
    }
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    broken = load_side(str(tmp_path))
    assert broken.checkpoint is None and len(broken.unread) == 1
    assert broken.unread[0].startswith(f"{tmp_path / 'model.safetensors'}: ")


def test_numbered_parts_are_not_steps(tmp_path: Path) -> None:
    for name in ("part0.safetensors", "part1.safetensors", "model_1.safetensors", "model_2.bin"):
        touch(tmp_path / "parts" / name)
    choice = choose_checkpoint(tmp_path / "parts")
    assert choice is not None and choice.path == tmp_path / "parts"
    for name in ("ckpt_1.pt", "ckpt_2.pt"):  # a step word: steps, even from 1
        touch(tmp_path / "steps" / name)
    for name in ("model_1000.pt", "model_2000.pt"):  # not numbered from 0 or 1: steps
        touch(tmp_path / "big" / name)
    assert choose_checkpoint(tmp_path / "steps").path.name == "ckpt_2.pt"  # type: ignore[union-attr]
    assert choose_checkpoint(tmp_path / "big").path.name == "model_2000.pt"  # type: ignore[union-attr]


def safetensors_file(path: Path, metadata: dict[str, str]) -> Path:
    header = {"__metadata__": metadata, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(8))
    return path


def test_safetensors_metadata_is_configuration(tmp_path: Path) -> None:
    """A LoRA's training settings live in its safetensors `__metadata__`: inspect shows them
    (secrets hidden, the "format" marker left out) and diff compares them."""
    a = safetensors_file(
        tmp_path / "a.safetensors", {"format": "pt", "ss_network_dim": "16", "hf_token": "x"}
    )
    b = safetensors_file(tmp_path / "b.safetensors", {"format": "pt", "ss_network_dim": "32"})
    result = CliRunner().invoke(cli, ["inspect", "--json", str(a)])
    assert result.exit_code == 0, result.output
    config = json.loads(result.stdout)["config"]
    assert config == {"__metadata__": {"ss_network_dim": "16", "hf_token": redact("x")}}
    found = groups(load_side(str(a)), load_side(str(b)))
    assert found == {
        "hyperparameters": {
            "checkpoint.__metadata__.ss_network_dim": ("16", "32"),
            "checkpoint.__metadata__.hf_token": (redact("x"), None),
        }
    }


# -- a snapshot as diff reads it (SnapshotRecord) --------------------------------------------
MINIMAL = {"schema": 1, "profile": {"name": "p"}, "lock": {"text": "x"}}


def test_a_snapshot_that_recorded_only_what_it_must_reads_as_nothing_recorded() -> None:
    record = SnapshotRecord.of(MINIMAL)
    assert record == SnapshotRecord()
    assert (record.torch, record.cache, record.datasets, record.config) == (
        RecordedTorch(),
        None,
        None,
        None,
    )
    # Every optional field null: the same as left out (datasets: none read, not unrecorded).
    nulls = {k: None for k in ("packages", "torch", "hardware", "scripts", "env", "cache")}
    nulled = SnapshotRecord.of({**MINIMAL, **nulls, "platform": None, "host": None})
    assert nulled == record
    assert SnapshotRecord.of({**MINIMAL, "datasets": None}).datasets == {}


def test_torch_s_label_is_the_recorded_one_else_the_version_s() -> None:
    def label(torch: dict[str, Any]) -> Any:
        return Side("x", None, SnapshotRecord.of({**MINIMAL, "torch": torch})).torch()

    assert label({"version": "2.11.0+cu128"})["local label"] == "cu128"
    assert label({"version": "2.11.0+cu128", "local": None})["local label"] is None
    assert label({"version": "2.11.0", "local": "cu130"})["local label"] == "cu130"
    found = label({"version": "2.11.0", "cuda": "13.0", "cudnn": "9.1"})
    assert (found["CUDA"], found["cuDNN"]) == ("13.0", "9.1")


def test_a_cache_recorded_empty_says_nothing_and_one_without_bytes_is_warm() -> None:
    assert SnapshotRecord.of({**MINIMAL, "cache": {}}).cache is None
    warm = {"dir": "/c", "exists": True, "files": 3, "fingerprint": {"id": "torch-a"}}
    cold = {**warm, "files": 0, "fingerprint": {"id": "torch-b"}}
    a = Side("a", None, SnapshotRecord.of({**MINIMAL, "cache": warm}))
    b = Side("b", None, SnapshotRecord.of({**MINIMAL, "cache": cold}))
    assert groups(a, b)["compile cache"] == {
        "fingerprint": ("torch-a", "torch-b"),
        "compile cache": ("warm (0 B)", "cold"),
    }


def test_hardware_is_read_from_the_record() -> None:
    doc = {
        **MINIMAL,
        "hardware": {"driver": "570", "gpus": [{"name": "H100", "capability": "9.0"}, {}]},
        "python": "3.11.7",
        "platform": {"machine": "x86_64"},
        "host": {"hostname": "n1"},
    }
    assert Side("x", None, SnapshotRecord.of(doc)).hardware() == {
        "GPUs": "H100 (sm 9.0), None (sm None)",
        "driver": "570",
        "python": "3.11.7",
        "machine": "x86_64",
        "host": "n1",
    }
    assert set(Side("lock", None).hardware().values()) == {None}


def test_a_script_recorded_without_a_hash_is_compared_not_a_crash() -> None:
    a = side(scripts={"sha256": {"train.py": None}})
    b = side(scripts={"sha256": {"train.py": "ab" * 32}})
    assert groups(a, b)["scripts"] == {"train.py": (None, "ab" * 6)}


def test_a_wrong_typed_field_is_refused_before_anything_reads_it(tmp_path: Path) -> None:
    snapshot = tmp_path / "envlock-snapshot.json"
    snapshot.write_text(json.dumps({**MINIMAL, "torch": {"version": 3}}))
    with pytest.raises(UsageError, match=r"torch\.version: expected a string, found 3"):
        load_side(str(snapshot))
