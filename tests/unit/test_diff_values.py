"""A changed list or dict is shown by what changed in it (issue #40): the index or key, a
bounded excerpt of its two values, what was added or removed counted; never both whole."""

from __future__ import annotations

from pathlib import Path

from envlock.runs.diff_types import Change, Group
from envlock.runs.diff_values import SHOWN_CHARS, excerpt


def test_one_element_changed_names_its_index_and_counts_what_was_added() -> None:
    a = [f"shard-{i}.bin" for i in range(20_000)]
    b = [*a, *(f"new-{i}.bin" for i in range(60_000))]
    b[17] = "b.bin"
    text = excerpt(a, b)
    assert text == "[17]: shard-17.bin → b.bin; 60,000 added"
    (change,) = Group("hyperparameters", (Change("args.train_files", a, b),)).to_json()["changes"]
    assert change["paths"] == ["[17]"] and change["grown"] == 60_000
    assert change["a"] == "<list of 20,000 items>" and change["b"] == "<list of 80,000 items>"


def test_a_dict_names_its_keys_and_cuts_long_values() -> None:
    a = {"lr": 1e-3, "note": "x" * 5_000, "keep": 1}
    b = {"lr": 2e-3, "note": "y" * 5_000, "new": True, "keep": 1}
    text = excerpt(a, b)
    assert text.startswith("lr: 0.001 → 0.002; note: ")
    assert text.endswith("(+4,880 chars); new: — → true")  # a key only in B: "—" in A
    assert len(text) < 4 * SHOWN_CHARS + 200


def test_many_changes_are_counted_not_listed() -> None:
    a = list(range(1_000))
    b = [i + 1 for i in a]
    assert excerpt(a, b).endswith("; 997 more changed")


def test_one_cause_of_unread_contents_is_said_once() -> None:
    """--weights over 22 tensors failing for one reason: one line, the count, three keys."""
    from envlock.runs.describe import by_cause

    unread = tuple(f"model.{i}.weight: shard.distcp: truncated" for i in range(22))
    assert by_cause((*unread, "x: strided")) == (
        "contents of 22 tensors (model.0.weight, model.1.weight, model.2.weight, …): "
        "shard.distcp: truncated",
        "contents of x: strided",
    )


def test_a_value_past_the_budget_is_cut_whole_never_part_way() -> None:
    """Where a budget runs out depends on what came before: a value cut part-way would
    differ from its twin after one earlier change. Past the budget anywhere, the whole value
    is cut, with the digest of all of it; equal values stay equal."""
    from envlock.checkpoint.digest import cut_digest
    from envlock.checkpoint.summary import plain

    rest = [f"{i:0>80}" for i in range(200_000)]  # 16 M characters: past the budget
    a, b = plain({"first": "a", "rest": rest}), plain({"first": "b" * 5_000, "rest": rest})
    assert cut_digest(a) == (True, True) and cut_digest(b) == (True, True) and a != b
    assert plain({"first": "a", "rest": list(rest)}) == a


def test_tied_against_untied_weights_is_said(tmp_path: Path) -> None:
    """`lm_head.weight` sharing `embed.weight`'s storage against its own copy: the tie is
    named, not only the parameter count."""
    from envlock.commands.diff import diff_of
    from tests.hostile_checkpoints.assemble import PROTO, state_dict, tensor, zipped

    tied = zipped(
        tmp_path / "tied.pt",
        PROTO + state_dict({"embed.weight": tensor("0"), "lm_head.weight": tensor("0")}) + b".",
    )
    untied = zipped(
        tmp_path / "untied.pt",
        PROTO + state_dict({"embed.weight": tensor("0"), "lm_head.weight": tensor("1")}) + b".",
        storages=2,
    )
    result = diff_of(str(tied), str(untied), follow_links=False, weights=False)
    (structure,) = [g for g in result.groups if g.name == "structure"]
    said = {c.key: (c.a, c.b) for c in structure.changes}
    assert said["lm_head.weight shares storage with"] == ("embed.weight", None)


def test_two_long_strings_are_said_from_where_they_differ() -> None:
    from envlock.runs.diff_values import long_texts

    a, b = "x" * 149_999 + "a", "x" * 149_999 + "b"
    assert long_texts(a, b, 400) == f"…{'x' * 20}a → …{'x' * 20}b (from char 149,999)"
    assert long_texts("short", "other", 400) is None
