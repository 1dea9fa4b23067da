"""`envlock diff` is "identical" only over what both sides cover (issue #40): a value cut by
inspect's budget compares by a digest of all of it, a truncated DCP shard is incomplete in
inspect and diff alike, a sidecar no weight reader knows (peft's adapter_config.json, a
tokenizer file, Lightning's hparams.yaml) is compared, and an equal result says what it
compared. Each pair is written by torch, DCP, transformers and peft themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envlock.checkpoint.digest import cut_digest
from envlock.cli import cli
from envlock.commands.diff import diff_of
from tests import coverage_variants
from tests.checkpoint.test_diff_truth import MATRIX, Pair, diff, reported


@pytest.fixture(scope="session")
def pairs(
    torch_python: Path, layouts: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Pair]:
    made = tmp_path_factory.mktemp("coverage-pairs")
    return coverage_variants.make_pairs(torch_python, layouts["root"], made)


def changes(doc: dict[str, Any], group: str) -> dict[str, list[Any]]:
    return reported(doc).get(group, {})


def test_a_list_past_the_budget_compares_by_digest(pairs: dict[str, Pair]) -> None:
    """300,000 vs 360,000 paths: past inspect's 250,000 objects, folded as read (fold.py),
    compared by digest, never "identical"; what changed is said (60,000 added)."""
    made = pairs["list past the budget"]
    code, doc, stderr = diff(made["a"], made["b"])
    assert code == 1, (stderr, doc)
    (key,) = changes(doc, "hyperparameters")
    assert key == "checkpoint.args.train_files"
    assert key in doc["coverage"]["by_digest"]
    a, b = changes(doc, "hyperparameters")[key]
    assert a.startswith("<cut: list of 300,000 items; sha256:")
    assert b.startswith("<cut: list of 360,000 items; sha256:")
    (change,) = next(g for g in doc["groups"] if g["name"] == "hyperparameters")["changes"]
    assert change["paths"] == [] and change["grown"] == 60_000


def test_a_string_past_the_budget_compares_by_digest(pairs: dict[str, Pair]) -> None:
    """150,000 characters, the last one differing: cut at 10,000, compared whole by digest,
    and said so (not "from char 10,025" of the cut text)."""
    made = pairs["string past the budget"]
    code, doc, stderr = diff(made["a"], made["b"])
    assert code == 1, (stderr, doc)
    assert set(changes(doc, "hyperparameters")) == {"checkpoint.args.prompt"}
    human = CliRunner().invoke(cli, ["diff", made["a"], made["b"]])
    line = next(x for x in human.stdout.splitlines() if "checkpoint.args.prompt" in x)
    said = line.split("checkpoint.args.prompt", 1)[1].strip()
    assert said.startswith("the first 10,000 chars alike; the rest (140,000 → 140,000 chars)")
    assert "differs: sha256 " in said and len(line) < 400


def test_one_element_of_a_100k_list_is_shown_by_its_index(pairs: dict[str, Pair]) -> None:
    """100,000 paths, one changed and 60,000 added: the index and the count, one short
    line, never both lists whole; --json carries the path of what changed."""
    made = pairs["one element of 100k"]
    code, doc, _ = diff(made["a"], made["b"])
    assert code == 1
    (change,) = next(g for g in doc["groups"] if g["name"] == "hyperparameters")["changes"]
    assert change["key"] == "checkpoint.args.train_files"
    assert change["paths"] == ["[17]"] and change["grown"] == 60_000
    assert change["a"].startswith("<cut: list of 100,000 items; sha256:")  # folded as read
    human = CliRunner().invoke(cli, ["diff", made["a"], made["b"]])
    line = next(x for x in human.stdout.splitlines() if "checkpoint.args.train_files" in x)
    assert line.split("train_files", 1)[1].strip() == (
        "[17]: shards/train-000017.bin → shards/replaced.bin; 60,000 added"
    )
    assert len(human.stdout) < 2_000


def test_an_equal_result_says_tensor_values_were_not_compared(pairs: dict[str, Pair]) -> None:
    """Equal metadata, different values: exit 0 without --weights, and the first line and the
    JSON say the values were not compared; --weights finds the tensor."""
    made = pairs["values without --weights"]
    code, doc, _ = diff(made["a"], made["b"])
    assert code == 0 and doc["identical"] is True
    assert doc["coverage"]["not_compared"] == [
        {"what": "tensor values", "why": "not read without --weights"}
    ]
    assert doc["coverage"]["whole"] == ["metadata", "configs"]
    human = CliRunner().invoke(cli, ["diff", made["a"], made["b"]])
    first = human.stdout.splitlines()[0]
    assert first == (
        f"✓ {made['a']} and {made['b']}: identical in metadata and configs; "
        "tensor values not compared — `--weights`"
    )
    weighed = CliRunner().invoke(cli, ["diff", "--weights", made["a"], made["a"]])
    assert "identical in metadata, configs and tensor values (2 tensors hashed)" in weighed.stdout
    result = CliRunner().invoke(cli, ["diff", "--json", "--weights", made["a"], made["b"]])
    assert result.exit_code == 1
    assert set(reported(json.loads(result.stdout))["weights"]) == {"model.bias"}


def test_a_truncated_dcp_shard_is_incomplete(pairs: dict[str, Pair]) -> None:
    """One .distcp cut in half (torch's own dcp_to_torch_save fails on it): inspect exits 3
    and names the shard; diff is incomplete, without --weights."""
    made = pairs["DCP truncated shard"]
    assert made["torch_reads"] is False
    inspected = CliRunner().invoke(cli, ["inspect", made["b"]])
    assert inspected.exit_code == 3, inspected.output
    assert ".distcp" in inspected.stderr and "truncated" in inspected.stderr
    code, doc, stderr = diff(made["a"], made["b"])
    assert code == 3, (stderr, doc)
    assert doc["identical"] is False and doc["complete"] is False
    assert "truncated" in doc["sides"]["b"]["unread"][0]
    assert doc["groups"] == []  # its files are the checkpoint's: never "other files"
    assert "nothing else differs" in stderr


def test_a_missing_dcp_shard_is_incomplete(pairs: dict[str, Pair]) -> None:
    made = pairs["DCP missing shard"]
    code, doc, _ = diff(made["a"], made["b"])
    assert code == 3 and doc["complete"] is False


def test_peft_adapters_differing_in_lora_alpha(pairs: dict[str, Pair]) -> None:
    """peft's save_pretrained with lora_alpha 16 vs 32: the same tensors, twice the scale."""
    made = pairs["peft lora_alpha"]
    assert made["changed"] == {"lora_alpha": [16, 32]}
    code, doc, stderr = diff(made["a"], made["b"])
    assert code == 1, (stderr, doc)
    assert changes(doc, "hyperparameters") == {"adapter_config.json: lora_alpha": [16, 32]}


@pytest.mark.parametrize(
    ("name", "group", "key"),
    [
        ("generation_config.json", "hyperparameters", "generation_config.json: temperature"),
        ("tokenizer file", "other files", "tokenizer.json"),
        ("hparams.yaml", "other files", "hparams.yaml"),
    ],
)
def test_a_changed_sidecar_is_a_difference(
    pairs: dict[str, Pair], name: str, group: str, key: str
) -> None:
    made = pairs[name]
    code, doc, stderr = diff(made["a"], made["b"])
    assert code == 1, (stderr, doc)
    assert set(reported(doc)) == {group} and set(changes(doc, group)) == {key}
    same, doc, _ = diff(made["a"], made["a"])
    assert same == 0
    if group == "other files":  # compared by the sha256 of its bytes, and said so
        assert f"file {key}" in doc["coverage"]["by_digest"]


def covered_whole_or_by_digest(a: str, b: str, weights: bool = False) -> None:
    """The property: an "identical" result has every covered value compared whole or by a
    digest of all of it, and tensor values hashed or declared not compared."""
    result = diff_of(a, b, follow_links=False, weights=weights)
    if result.differ or result.unread:
        return
    for side in (result.side_a, result.side_b):
        for key, value in side.config().items():
            is_cut, digested = cut_digest(value)
            assert digested or not is_cut, (a, b, key)
    both = result.side_a.checkpoint is not None and result.side_b.checkpoint is not None
    if both:
        declared = {w for w, _ in result.coverage.not_compared}
        assert weights or "tensor values" in declared, (a, b)
        assert not weights or result.coverage.hashed is not None, (a, b)


def test_identical_means_covered_for_every_pair_the_suite_builds(
    pairs: dict[str, Pair], variants: list[Pair]
) -> None:
    built = [(p["a"], p["b"]) for p in pairs.values()]
    built += [(p["a"], p["b"]) for p in variants if "a" in p and "b" in p]
    built += [(p["a"], p["a"]) for p in variants if "a" in p]
    assert len([p for p in variants if "what" in p]) == len(MATRIX)
    for a, b in built:
        covered_whole_or_by_digest(a, b)
    for p in (p for p in variants if p.get("layout") == "values"):
        covered_whole_or_by_digest(p["a"], p["a"], weights=True)
