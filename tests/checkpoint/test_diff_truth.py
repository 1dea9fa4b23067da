"""`envlock diff` tells the whole truth (issue #26): on real layouts written by torch,
safetensors, transformers, accelerate and DCP, each pair of runs that differ in exactly one
thing (lr, a config value, a key removed, a shape, a dtype, the step) reports exactly that
thing, as torch itself reads it, and exits 1; a self-diff exits 0; what could not be read
makes the comparison incomplete (exit 3), never "no differences"."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envlock.cli import cli

Pair = dict[str, Any]


def diff(*args: str | Path) -> tuple[int, dict[str, Any], str]:
    """`envlock diff --json` in this process: its exit code, document and stderr."""
    result = CliRunner().invoke(cli, ["diff", "--json", *map(str, args)])
    return result.exit_code, json.loads(result.stdout), result.stderr


def reported(doc: dict[str, Any]) -> dict[str, dict[str, list[Any]]]:
    return {
        g["name"]: {c["key"]: [c["a"], c["b"]] for c in g["changes"]}
        for g in doc["groups"]
        if g["counted"]
    }


MATRIX = [
    ("seed file", "lr"),
    ("seed file", "config value"),
    ("seed file", "key removed"),
    ("seed file", "shape"),
    ("seed file", "dtype"),
    ("seed file", "step"),
    ("seed dir", "lr"),
    ("seed dir", "step"),
    ("save_pretrained", "config value"),
    ("save_pretrained", "key removed"),
    ("save_pretrained", "shape"),
    ("save_pretrained", "dtype"),
    ("accelerate save_state", "lr"),
    ("accelerate save_state", "key removed"),
    ("accelerate save_state", "shape"),
    ("accelerate save_state", "dtype"),
    ("Trainer output_dir", "shape"),
    ("DCP", "lr"),
    ("DCP", "step"),
    ("DCP", "key removed"),
    ("DCP", "shape"),
    ("DCP", "dtype"),
    ("accelerate FSDP", "lr"),
    ("Lightning", "hparam"),
    ("Lightning", "optimizer setting"),
]


def test_the_matrix_is_the_one_generated(variants: list[Pair]) -> None:
    pairs = [p for p in variants if "what" in p]
    assert sorted((p["layout"], p["what"]) for p in pairs) == sorted(MATRIX)


@pytest.mark.parametrize(("layout", "what"), MATRIX, ids=[f"{lay}-{w}" for lay, w in MATRIX])
def test_one_difference_reports_exactly_it(variants: list[Pair], layout: str, what: str) -> None:
    pair = next(p for p in variants if (p["layout"], p.get("what")) == (layout, what))
    assert pair["groups"], f"torch sees no difference in {layout}/{what}: a broken variant"
    code, doc, stderr = diff(pair["a"], pair["b"])
    assert code == 1, (code, stderr, doc)
    assert reported(doc) == pair["groups"]
    assert doc["identical"] is False and doc["complete"] is True and doc["schema"] == 1
    flipped, back, _ = diff(pair["b"], pair["a"])
    assert flipped == 1
    assert reported(back) == {
        group: {k: v[::-1] for k, v in changes.items()} for group, changes in pair["groups"].items()
    }


@pytest.mark.parametrize("layout", sorted({lay for lay, _ in MATRIX}))
def test_a_self_diff_is_identical(variants: list[Pair], layout: str) -> None:
    side = next(p for p in variants if p["layout"] == layout)["a"]
    code, doc, stderr = diff(side, side)
    assert code == 0, (stderr, doc)
    assert doc["identical"] is True and doc["complete"] is True and doc["groups"] == []
    compared = doc["sides"]["a"]
    assert compared["checkpoint"] and compared["files"] and compared["unread"] == []


def test_a_directory_names_the_checkpoint_it_compared(variants: list[Pair], tmp_path: Path) -> None:
    """Of step10.pt and step20.pt the newest by step is compared (not by mtime), and named."""
    seed = Path(next(p for p in variants if p["layout"] == "seed file")["a"]).parent.parent
    for run, newer in (("a", "base"), ("b", "lr")):
        (tmp_path / run).mkdir()
        shutil.copyfile(seed / newer / "ckpt.pt", tmp_path / run / "step20.pt")
        shutil.copyfile(seed / "base" / "ckpt.pt", tmp_path / run / "step10.pt")
        os.utime(tmp_path / run / "step20.pt", (1, 1))  # older by mtime, newer by step
    code, doc, _ = diff(tmp_path / "a", tmp_path / "b")
    assert code == 1
    assert set(reported(doc)["hyperparameters"]) == {
        "checkpoint.optimizer_state_dict.param_groups.0.lr"
    }
    sides = doc["sides"]
    assert sides["b"]["checkpoint"] == str(tmp_path / "b" / "step20.pt")
    assert sides["b"]["chosen_from"] == [
        str(tmp_path / "b" / n) for n in ("step20.pt", "step10.pt")
    ]
    human = CliRunner().invoke(cli, ["diff", str(tmp_path / "a"), str(tmp_path / "b")])
    assert f"B: compared {tmp_path / 'b' / 'step20.pt'} (the newest of 2" in human.stdout


def test_an_unreadable_newest_checkpoint_makes_the_comparison_incomplete(
    variants: list[Pair], tmp_path: Path
) -> None:
    """A corrupt newest checkpoint is listed and exits 3: never "no differences"."""
    seed = Path(next(p for p in variants if p["layout"] == "seed file")["a"]).parent.parent
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        shutil.copyfile(seed / "base" / "ckpt.pt", tmp_path / run / "step10.pt")
    (tmp_path / "b" / "step20.pt").write_bytes(b"PK\x03\x04 truncated")
    code, doc, stderr = diff(tmp_path / "a", tmp_path / "b")
    assert code == 3, (stderr, doc)
    assert doc["identical"] is False and doc["complete"] is False
    assert doc["sides"]["b"]["unread"][0].startswith(f"{tmp_path / 'b' / 'step20.pt'}: ")
    assert "the comparison is incomplete: B: " in stderr and "step20.pt" in stderr
    human = CliRunner().invoke(cli, ["diff", str(tmp_path / "a"), str(tmp_path / "b")])
    assert human.exit_code == 3 and "no differences" not in human.stdout


def test_different_models_are_never_identical(layouts: dict[str, Any]) -> None:
    """Two weight files with no config at all: their keys, shapes and counts still differ."""
    root = layouts["root"]
    code, doc, _ = diff(root / "pretrained_a" / "model.safetensors", root / "dcp")
    assert code == 1
    structure = reported(doc)["structure"]
    # DCP keys its entries under "model.": every key is on one side only.
    keys = {k: v for k, v in structure.items() if k != "parameters"}
    assert keys and all(a is None or b is None for a, b in keys.values())
    assert "model.embed_tokens.weight" in keys and "model.model.embed_tokens.weight" in keys


def test_a_config_on_one_side_only_shows_as_only_in_a(variants: list[Pair]) -> None:
    """The seed's layout against a bare state dict of the same weights: its config, args,
    optimizer settings and step show as "only in A", never vanish."""
    seed = Path(next(p for p in variants if p["layout"] == "seed file")["a"])
    code, doc, _ = diff(seed, seed.parent.parent / "bare.pt")
    assert code == 1
    kinds = {g["name"]: {c["key"]: c["kind"] for c in g["changes"]} for g in doc["groups"]}
    assert set(kinds) == {"structure", "hyperparameters", "progress"}
    assert kinds["progress"] == {"step": "removed", "epoch": "removed"}
    hyper = kinds["hyperparameters"]
    assert set(hyper.values()) == {"removed"}
    assert {"checkpoint.config.n_embd", "checkpoint.args.batch_size"} <= set(hyper)
    assert "checkpoint.optimizer_state_dict.param_groups.0.lr" in hyper
    # The same weights (as many parameters), under other keys; the optimizer's state in A only.
    assert "parameters" not in kinds["structure"]
    assert kinds["structure"]["model_state_dict.0.weight"] == "removed"
    assert kinds["structure"]["0.weight"] == "added"
    assert "optimizer_state_dict.state.0.exp_avg" in kinds["structure"]
    # A directory holding one checkpoint file is read as that file: its keys compare.
    assert diff(seed, seed.parent)[0] == 0


def test_one_ranks_fsdp2_file_is_described_as_its_local_shards(variants: list[Pair]) -> None:
    """torch.save of an FSDP2 state dict on rank 0 of 2: local shapes, elements and bytes,
    each tensor's placement and global shape, and a note that it is half of each tensor."""
    made = next(p for p in variants if p["layout"] == "DTensor")
    result = CliRunner().invoke(cli, ["inspect", "--json", made["path"], "--keys", "*"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    truth = made["tensors"]
    rows = {r["key"]: r for r in data["keys"]}
    assert {k: r["shape"] for k, r in rows.items()} == {k: t["local"] for k, t in truth.items()}
    for key, t in truth.items():
        local, whole = ", ".join(map(str, t["local"])), ", ".join(map(str, t["global"]))
        assert (
            rows[key]["sharding"]
            == f"Shard(dim=0) over 2 rank(s): local [{local}] of global [{whole}]"
        )
    assert data["tensors"]["params"] == sum(t["numel"] for t in truth.values())
    assert data["tensors"]["storages"] == len(truth)
    assert data["size"]["tensor_bytes"] == 4 * sum(t["numel"] for t in truth.values())
    assert any("(1/2 of each tensor, sharded over 2 ranks)" in n for n in data["notes"])


def test_accelerates_own_counter_is_no_progress(layouts: dict[str, Any]) -> None:
    """accelerate's random_states_0.pkl keeps its accumulation counter as `step` (0 after an
    optimizer step): not the run's progress."""
    result = CliRunner().invoke(cli, ["inspect", "--json", str(layouts["root"] / "accelerate_a")])
    assert result.exit_code == 0, result.output
    assert "step" not in json.loads(result.stdout)["progress"]


def test_inspect_of_a_trainer_output_dir_reads_its_newest_checkpoint(
    layouts: dict[str, Any],
) -> None:
    """inspect chooses as diff does, and says which checkpoint-N/ it read."""
    run = layouts["root"] / "trainer_a" / "run"
    result = CliRunner().invoke(cli, ["inspect", "--json", str(run)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["path"] == str(run / "checkpoint-2")
    assert data["notes"][0] == f"read {run / 'checkpoint-2'}"
    assert data["tensors"]["params"] == layouts["pretrained"]["params"]


@pytest.mark.parametrize("fmt", ["torch-zip", "safetensors", "dcp"])
def test_weights_compares_tensor_contents(variants: list[Pair], fmt: str) -> None:
    """Two checkpoints alike in keys, shapes, dtypes and config, one tensor's values changed:
    without --weights their metadata is identical (exit 0); with it, exactly that tensor is
    named (exit 1), each digest the sha256 torch's own bytes of the tensor give."""
    made = next(p for p in variants if p["layout"] == "values" and p["format"] == fmt)
    assert len(made["differ"]) == 1 and made["same"]
    code, doc, stderr = diff(made["a"], made["b"])
    assert code == 0, (stderr, doc)
    assert doc["identical"] is True
    result = CliRunner().invoke(cli, ["diff", "--json", "--weights", made["a"], made["b"]])
    doc = json.loads(result.stdout)
    assert result.exit_code == 1, (result.stderr, doc)
    assert doc["complete"] is True
    assert reported(doc) == {
        "weights": {k: [a[:16], b[:16]] for k, (a, b) in made["differ"].items()}
    }
    group = next(g for g in doc["groups"] if g["name"] == "weights")
    compared = int(group["note"].split(" of ")[1].split(" ")[0].replace(",", ""))
    assert group["note"].startswith("1 of ") and compared >= 1 + len(made["same"])
    same = CliRunner().invoke(cli, ["diff", "--json", "--weights", made["a"], made["a"]])
    assert same.exit_code == 0 and json.loads(same.stdout)["identical"] is True


def test_a_float4_tensor_counts_alike_from_pt_and_safetensors(variants: list[Pair]) -> None:
    """safetensors keeps torch's float4_e2m1fn_x2 as F4 with the last dim doubled: described
    as torch loads it, the same tensor has the same dtype, shape, elements and contents."""
    made = next(p for p in variants if p["layout"] == "float4")
    for path in (made["a"], made["b"]):
        result = CliRunner().invoke(cli, ["inspect", "--json", path, "--keys", "*"])
        (row,) = json.loads(result.stdout)["keys"]
        assert f"{row['dtype']} [{', '.join(map(str, row['shape']))}]" == made["dtype"]
        assert row["numel"] == made["numel"][0] == made["numel"][1]
    result = CliRunner().invoke(cli, ["diff", "--json", "--weights", made["a"], made["b"]])
    assert result.exit_code == 0, result.stdout


def test_lightning_checkpoints_differing_in_tensor_values(variants: list[Pair]) -> None:
    """Two Lightning Trainer runs alike but for their data: the same hparams, optimizer and
    scheduler settings, loops and callbacks (exit 0, values not compared); with --weights,
    exactly the tensors torch finds unequal, counted as torch counts them."""
    made = next(p for p in variants if p["layout"] == "Lightning values")
    assert not any(made["truth"].values()) and made["differ"]
    code, doc, stderr = diff(made["a"], made["b"])
    assert code == 0, (stderr, doc)
    assert doc["coverage"]["whole"] == ["metadata", "configs", "training state"]
    result = CliRunner().invoke(cli, ["diff", "--json", "--weights", made["a"], made["b"]])
    doc = json.loads(result.stdout)
    assert result.exit_code == 1, (result.stderr, doc)
    (group,) = (g for g in doc["groups"] if g["counted"])
    assert group["name"] == "weights"
    assert sorted(c["key"] for c in group["changes"]) == made["differ"]
    assert group["note"].startswith(
        f"{len(made['differ']):,} of {made['tensors']:,} tensors on both sides differ"
    )


def test_inspect_reads_a_lightning_checkpoint_as_torch_does(layouts: dict[str, Any]) -> None:
    """A ModelCheckpoint .ckpt: hparams as config, epoch and global_step as progress, the
    model's parameters counted as torch counts them, every top-level entry accounted for."""
    truth = layouts["lightning"]
    result = CliRunner().invoke(cli, ["inspect", "--json", truth["ckpt"]["lightning_a"]])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["config"] == {"hyper_parameters": truth["hyper_parameters"]}
    assert data["progress"] == {"epoch": 0, "global_step": 2}
    assert data["tensors"]["params"] == truth["params"]
    assert set(data["structure"]["children"]) == set(truth["keys"])


def test_a_lightning_root_dir_compares_its_newest_checkpoint(layouts: dict[str, Any]) -> None:
    """A Trainer's default_root_dir: lightning_logs/version_N/checkpoints/ is found, its
    .ckpt compared and named; hparams.yaml beside it compared by its bytes."""
    root, ckpt = layouts["root"], layouts["lightning"]["ckpt"]
    code, doc, stderr = diff(root / "lightning_a", root / "lightning_hparam")
    assert code == 1, (stderr, doc)
    assert doc["sides"]["a"]["checkpoint"] == ckpt["lightning_a"]
    assert "checkpoint.hyper_parameters.lr" in reported(doc)["hyperparameters"]
    assert set(reported(doc)["other files"]) == {"lightning_logs/version_0/hparams.yaml"}
    same, doc, _ = diff(root / "lightning_a", root / "lightning_a")
    assert same == 0 and doc["coverage"]["whole"] == ["metadata", "configs", "training state"]
