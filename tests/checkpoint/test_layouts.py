"""`envlock inspect` and `envlock diff` on the layouts real training libraries write:
save_pretrained, the HF Trainer, accelerate save_state, torch.distributed.checkpoint (DCP)
and accelerate's FSDP layout of it, each compared with the library's own reading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envlock.checkpoint.runfiles import split_run_paths
from envlock.commands.inspect import inspect_cmd
from tests.conftest import Envlock


def inspect_json(path: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(inspect_cmd, [str(path), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def keyed(data: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    return {
        r["key"].removeprefix(prefix): {"dtype": r["dtype"], "shape": r["shape"]}
        for r in data["keys"]
    }


def hyperparameters(envlock: Envlock, a: Path, b: Path) -> tuple[int, dict[str, Any]]:
    result = envlock("diff", "--json", a, b)
    groups = {g["name"]: g for g in json.loads(result.stdout)["groups"]}
    changes = groups.get("hyperparameters", {"changes": []})["changes"]
    return result.returncode, {c["key"]: (c["a"], c["b"]) for c in changes}


# --- inspect ------------------------------------------------------------------------------------


def test_save_pretrained_matches_safe_open(layouts: dict[str, Any]) -> None:
    data = inspect_json(layouts["root"] / "pretrained_a", "--keys", "*")
    assert keyed(data, "model.safetensors.") == layouts["pretrained"]["tensors"]
    assert data["tensors"]["params"] == layouts["pretrained"]["params"]
    # A key pattern matches with or without the file name the directory view puts first.
    layer = inspect_json(layouts["root"] / "pretrained_a", "--keys", "model.layers.0.*")
    prefixed = inspect_json(
        layouts["root"] / "pretrained_a", "--keys", "model.safetensors.model.layers.0.*"
    )
    expected = {k for k in layouts["pretrained"]["tensors"] if k.startswith("model.layers.0.")}
    assert {r["key"].removeprefix("model.safetensors.") for r in layer["keys"]} == expected
    assert layer["keys"] == prefixed["keys"] and expected


def test_hub_download_with_both_formats_counts_weights_once(layouts: dict[str, Any]) -> None:
    data = inspect_json(layouts["root"] / "hub_download")
    assert data["tensors"]["params"] == layouts["pretrained"]["params"]
    assert data["tensors"]["numel"] == layouts["pretrained"]["params"]
    assert data["tensors"]["state"]["duplicate"] == layouts["pretrained"]["params"]
    assert any(
        "pytorch_model.bin holds the same weights as model.safetensors" in n for n in data["notes"]
    )
    kinds = {s["key"]: s["kind"] for s in data["sections"]}
    assert kinds["pytorch_model.bin"] == "duplicate"


def test_trainer_checkpoint_counts_parameters_not_rng(layouts: dict[str, Any]) -> None:
    data = inspect_json(layouts["root"] / "trainer_a" / "run" / "checkpoint-2")
    tensors = data["tensors"]
    assert tensors["params"] == layouts["pretrained"]["params"]
    rng = layouts["trainer"]["rng"]["cpu"]
    assert tensors["state"]["rng"] >= rng["shape"][0]  # the CPU generator's ByteTensor at least
    assert tensors["state"]["optimizer"] > 0
    kinds = {s["key"]: s["kind"] for s in data["sections"]}
    assert kinds["rng_state.pth"] == "rng" and kinds["optimizer.pt"] == "optimizer"
    assert kinds["model.safetensors"] == "state_dict"


def test_accelerate_state_counts_parameters_not_random_states(layouts: dict[str, Any]) -> None:
    data = inspect_json(layouts["root"] / "accelerate_a")
    assert data["tensors"]["params"] == layouts["pretrained"]["params"]
    kinds = {s["key"]: s["kind"] for s in data["sections"]}
    assert kinds["random_states_0.pkl"] == "rng"
    assert data["tensors"]["state"]["rng"] > 0


def test_dcp_directory_matches_its_metadata(layouts: dict[str, Any]) -> None:
    data = inspect_json(layouts["root"] / "dcp", "--keys", "*")
    assert data["format"] == "dcp"
    assert keyed(data) == layouts["dcp"]["tensors"]
    assert data["tensors"]["params"] == layouts["dcp"]["params"]
    assert any("1 shard file(s) written by 1 rank(s)" in n for n in data["notes"])
    assert [f["format"] for f in data["files"]] == ["dcp-metadata", "dcp-shard"]


def test_dcp_with_model_and_optimizer_counts_only_the_model(layouts: dict[str, Any]) -> None:
    data = inspect_json(layouts["root"] / "dcp_combined")
    assert data["tensors"]["params"] == layouts["dcp"]["params"]
    assert data["tensors"]["state"]["optimizer"] == layouts["dcp_combined"]["optimizer_numel"]


def test_dcp_copy_with_a_listed_shard_missing_is_refused(
    layouts: dict[str, Any], envlock: Envlock, tmp_path: Path
) -> None:
    """A half-copied DCP directory (its .metadata lists a shard that is not there) is refused,
    never read as whole: its tensors would be counted from .metadata alone."""
    copy = tmp_path / "dcp"
    shutil.copytree(layouts["root"] / "dcp", copy)
    (copy / "__0_0.distcp").unlink()
    result = envlock("inspect", copy)
    assert result.returncode == 3, result.stdout
    assert "shard __0_0.distcp is listed in .metadata but missing (1 of 1)" in result.stderr
    assert "an incomplete copy" in result.stderr and "Traceback" not in result.stderr


def test_lone_distcp_shard_is_refused(layouts: dict[str, Any], envlock: Envlock) -> None:
    shard = layouts["root"] / "dcp" / "__0_0.distcp"
    result = envlock("inspect", shard)
    assert result.returncode == 2
    assert "one shard of a torch.distributed.checkpoint" in result.stderr
    assert f"envlock inspect {shard.parent}" in result.stderr


def test_accelerate_fsdp_layout_reports_its_parameters(layouts: dict[str, Any]) -> None:
    data = inspect_json(layouts["root"] / "fsdp")
    assert data["tensors"]["params"] == layouts["dcp"]["params"]
    assert data["tensors"]["state"]["optimizer"] == layouts["fsdp"]["optimizer_numel"]
    kinds = {s["key"]: s["kind"] for s in data["sections"]}
    assert kinds == {"pytorch_model_fsdp_0": "state_dict", "optimizer_0": "optimizer"}


# --- diff ---------------------------------------------------------------------------------------


def test_diff_save_pretrained_rope_theta(layouts: dict[str, Any], envlock: Envlock) -> None:
    root = layouts["root"]
    code, changes = hyperparameters(envlock, root / "pretrained_a", root / "pretrained_b")
    assert code == 1
    assert changes == {"config.json: rope_parameters.rope_theta": (10000.0, 500000.0)}
    human = envlock("diff", root / "pretrained_a", root / "pretrained_b").stdout
    assert "config.json: rope_parameters.rope_theta" in human and "500000.0" in human
    assert envlock("diff", root / "pretrained_a", root / "pretrained_same").returncode == 0


def test_diff_trainer_runs_learning_rate(layouts: dict[str, Any], envlock: Envlock) -> None:
    root = layouts["root"]
    assert layouts["trainer"]["lr"] == 1e-3
    # The output_dir holds only checkpoint-2/: its newest checkpoint is compared.
    code, changes = hyperparameters(envlock, root / "trainer_a" / "run", root / "trainer_b" / "run")
    assert code == 1
    assert changes["training_args.bin: learning_rate"] == (1e-3, 2e-3)
    assert changes["optimizer.pt: param_groups.0.initial_lr"] == (1e-3, 2e-3)
    same = envlock("diff", root / "trainer_a" / "run", root / "trainer_same" / "run")
    assert same.returncode == 0, same.stdout


def test_diff_accelerate_runs_learning_rate(layouts: dict[str, Any], envlock: Envlock) -> None:
    root = layouts["root"]
    code, changes = hyperparameters(envlock, root / "accelerate_a", root / "accelerate_b")
    assert code == 1
    assert layouts["accelerate"]["optimizer_lr"] == 1e-3
    assert changes == {
        "optimizer.bin: param_groups.0.lr": (1e-3, 2e-3),
        "custom_checkpoint_0.pkl: scale": (0.5, 0.25),  # a registered object's state_dict
    }
    assert envlock("diff", root / "accelerate_a", root / "accelerate_same").returncode == 0


@pytest.mark.parametrize("name", ["training_args.bin", "optimizer.bin", "custom_checkpoint_0.pkl"])
def test_diff_run_files_go_through_the_limits(
    layouts: dict[str, Any], envlock: Envlock, tmp_path: Path, name: str
) -> None:
    import pickle
    import shutil

    side = tmp_path / "hostile"
    shutil.copytree(layouts["root"] / "pretrained_a", side)
    nested: list[Any] = []
    for _ in range(300):  # past the 256 levels a pickle may nest
        nested = [nested]
    (side / name).write_bytes(pickle.dumps(nested, protocol=2))
    result = envlock("diff", layouts["root"] / "pretrained_a", side)
    assert result.returncode == 3, result.stderr
    assert "refusing" in result.stderr and name in result.stderr


def test_diff_trainer_runs_in_other_output_dirs(layouts: dict[str, Any], envlock: Envlock) -> None:
    # trainer_moved: trainer_a's settings, written to another (absolute) output_dir.
    root = layouts["root"]
    a, moved = root / "trainer_a" / "run", root / "trainer_moved" / "elsewhere"
    result = envlock("diff", "--json", a, moved)
    assert result.returncode == 0, result.stdout
    data = json.loads(result.stdout)
    assert data["identical"] is True
    assert data["groups"] == [
        {
            "name": "run paths",
            "note": "where each run wrote its files, not how it trained: not counted",
            "counted": False,
            "changes": [
                {
                    "key": "training_args.bin: output_dir",
                    "a": "run",
                    "b": layouts["trainer"]["moved_output_dir"],
                    "kind": "changed",
                }
            ],
        }
    ]
    human = envlock("diff", a, moved)
    assert human.returncode == 0
    assert human.stdout.startswith(
        f"✓ {a} and {moved}: identical in metadata, configs and training state; "
        "tensor values not compared"
    )
    assert "run paths (where each run wrote its files" in human.stdout
    assert "training_args.bin: output_dir" in human.stdout and "difference(s)" not in human.stdout


def test_diff_output_dir_is_no_hyperparameter(layouts: dict[str, Any], envlock: Envlock) -> None:
    root = layouts["root"]
    moved, b = root / "trainer_moved" / "elsewhere", root / "trainer_b" / "run"
    code, changes = hyperparameters(envlock, moved, b)
    assert code == 1
    assert changes["training_args.bin: learning_rate"] == (1e-3, 2e-3)
    assert not [k for k in changes if "output_dir" in k]
    human = envlock("diff", moved, b).stdout
    counted = sum(len(g["changes"]) for g in _groups(envlock, moved, b) if g["counted"])
    assert f"{counted} difference(s) between" in human
    assert "run paths (where each run wrote" in human and "training_args.bin: output_dir" in human


def _groups(envlock: Envlock, a: Path, b: Path) -> list[dict[str, Any]]:
    return json.loads(envlock("diff", "--json", a, b).stdout)["groups"]


def test_run_paths_split_from_settings() -> None:
    # transformers 4.x also wrote logging_dir and defaulted run_name to output_dir.
    found = {
        "training_args.bin": {
            "output_dir": "out/a", "logging_dir": "out/a/runs/May01_host", "run_name": "out/a",
            "learning_rate": 1e-3, "seed": 0,
        },
        "trainer_state.json": {"best_model_checkpoint": "out/a/checkpoint-2", "global_step": 2},
        "config.json": {"output_dir": "not a run path here", "rope_theta": 1e4},
    }  # fmt: skip
    settings, paths = split_run_paths(found)
    assert paths == {
        "training_args.bin": {
            "output_dir": "out/a", "logging_dir": "out/a/runs/May01_host", "run_name": "out/a",
        },
        "trainer_state.json": {"best_model_checkpoint": "out/a/checkpoint-2"},
    }  # fmt: skip
    assert settings == {
        "training_args.bin": {"learning_rate": 1e-3, "seed": 0},
        "trainer_state.json": {"global_step": 2},
        "config.json": {"output_dir": "not a run path here", "rope_theta": 1e4},
    }
    named = {"training_args.bin": {"output_dir": "out/a", "run_name": "sweep-lr-1e-3"}}
    assert split_run_paths(named) == (
        {"training_args.bin": {"run_name": "sweep-lr-1e-3"}},
        {"training_args.bin": {"output_dir": "out/a"}},
    )
