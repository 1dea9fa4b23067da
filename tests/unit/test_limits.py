"""base/limits.py in isolation: the per-command budget, the refusals and their words,
and the bounded, escaped text every message from a checkpoint goes through. Pure, instant.
test_hostile_inspect.py proves the same limits on hostile files through the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.base.limits import (
    BUDGET,
    MAX_DIM,
    MAX_DIMS,
    Budget,
    Refused,
    brief,
    budget,
    check_dims,
    check_numel,
    command_budget,
    printable,
    printable_errors,
    shown,
)
from envlock.errors import OperationError


def test_a_refusal_says_what_exceeds_which_limit_and_keeps_it_at_a_file() -> None:
    refused = Refused("a pickle of 3 GiB", "256 MiB")
    assert refused.message == "refusing: a pickle of 3 GiB exceeds 256 MiB"
    assert refused.exit_code == 3 and (refused.what, refused.limit) == (
        "a pickle of 3 GiB",
        "256 MiB",
    )
    assert refused.hint == (
        "no real checkpoint comes near this limit: the file is corrupt or built to exhaust "
        "time or memory (envlock inspect's limits are listed on the docs' Security page)"
    )
    at = Refused("x", "y", hint="own hint").at("model.pt")
    assert at.message == "refusing: model.pt: x exceeds y" and at.hint == "own hint"
    assert (at.what, at.limit) == ("model.pt: x", "y")


def test_a_budget_is_spent_up_to_its_limit_then_refused_naming_the_command() -> None:
    spent = Budget("inspect")
    assert spent.left("tensors") == BUDGET["tensors"]
    spent.spend("tensors", BUDGET["tensors"] - 1)
    spent.spend("tensors", 1, "a.pt")  # exactly the budget: still allowed
    assert spent.left("tensors") == 0 and spent.spent["bytes"] == 0
    with pytest.raises(Refused) as info:
        spent.spend("tensors", 1, "b.pt")
    total = BUDGET["tensors"] + 1
    assert info.value.message == (
        f"refusing: b.pt: the tensors read by this `inspect` ({total:,} so far) exceeds "
        f"its budget of {BUDGET['tensors']:,} tensors per command"
    )
    assert info.value.hint == (
        "no real run comes near this budget: the files read are built to exhaust time or "
        "memory (envlock's budgets are listed on the docs' Security page)"
    )
    with pytest.raises(Refused, match=r"^refusing: the tensors read"):
        spent.spend("tensors", 1)  # no file named: none in the message
    assert spent.refused("bytes").what == "the bytes read by this `inspect` (0 so far)"


def test_one_budget_per_command_shared_by_every_read_within() -> None:
    assert budget().command == "read" and budget() is not budget()  # outside: a fresh one
    with command_budget("diff") as outer:
        assert budget() is outer and outer.command == "diff"
        with command_budget("inspect") as inner:
            assert inner is outer  # a nested read spends from the command's budget
        outer.spend("bytes", 10)
        assert budget().spent["bytes"] == 10
    assert budget().command == "read" and budget().spent["bytes"] == 0


def test_shown_quotes_escapes_and_cuts() -> None:
    assert shown("a\x1bb") == "'a\\x1bb'"
    assert shown("x" * 200) == repr("x" * 200)
    assert shown("x" * 203) == "'" + "x" * 200 + "…' (+3 chars)"
    assert shown("abcdef", 4) == "'abcd…' (+2 chars)"


def test_printable_escapes_only_what_is_unprintable_and_cuts_long_text() -> None:
    assert printable("plain text") == "plain text"
    assert printable("red \x1b[31m\n") == "red \\x1b[31m\\n"
    assert printable("\ud800") == "\\ud800"
    assert printable("x" * 1_001) == "x" * 1_000 + "…(+1 chars)"
    assert printable("y" * 1_000) == "y" * 1_000
    assert printable("abc\x07", 2) == "ab…(+2 chars)"
    assert printable("a\\b\x07") == "a\\b\\x07"  # a printable backslash stays one


def test_brief_describes_any_value_in_bounded_time() -> None:
    assert brief("name") == "'name'"
    assert brief(None) == "None" and brief(True) == "True" and brief(1.5) == "1.5"
    assert brief(2**64 - 1) == str(2**64 - 1) and brief(2**64) == "<65-bit int>"
    assert brief(b"abc") == "<3 bytes>" and brief(bytearray(2)) == "<2 bytes>"
    assert brief([]) == "list()" and brief({}) == "dict()"
    assert brief([1, 2]) == "list(1, 2)"
    assert brief((1, 2, 3, 4, 5, 6)) == "tuple(1, 2, 3, 4, … 2 more)"
    assert brief({"a": 1}) == "dict(tuple('a', 1))"
    assert brief([[[1]]]) == "list(list(<list of 1>))"  # two levels, then a count
    assert brief(object()) == "<object>"
    assert brief(["x" * 100] * 4).endswith("'xxxxxxxxxxxxxxxxxxxxxxx…(+32 chars)")  # 200
    assert brief("\x1b" * 300, 10) == "'\\x1b\\x1b\\…(+166 chars)"  # shown(40), then cut
    shared: list[object] = []
    for _ in range(100):
        shared = [shared, shared]  # repr of this would take 2**100 steps
    assert brief(shared).startswith("list(list(<list of 2>, <list of 2>)")


def test_dims_within_torch_s_bounds() -> None:
    assert check_dims((2, 3), "shape") == (2, 3)
    assert check_dims((MAX_DIM,) * MAX_DIMS, "stride") == (MAX_DIM,) * MAX_DIMS
    with pytest.raises(Refused, match=r"a tensor shape of 65 dims exceeds 64 dims"):
        check_dims((1,) * 65, "shape")
    assert check_dims((0, 1), "shape") == (0, 1)  # an empty dimension is no corruption
    with pytest.raises(Refused, match=r"stride dim of 9223372036854775808 exceeds torch's int64"):
        check_dims((MAX_DIM + 1,), "stride")
    with pytest.raises(OperationError, match=r"a tensor shape dim of -1: a negative size") as info:
        check_dims((1, -1), "shape")
    assert not isinstance(info.value, Refused)


def test_the_element_count_is_refused_past_int64_without_the_whole_product() -> None:
    check_numel((MAX_DIM,))
    check_numel((2**31, 2**31))
    check_numel((MAX_DIM, MAX_DIM, 0))  # no element at all, whatever the other dims
    with pytest.raises(
        Refused, match=r"the element count of shape list\(4294967296, 4294967296, 2\)"
    ):
        check_numel((2**32, 2**32, 2))
    with pytest.raises(Refused, match=r"exceeds 2\*\*63-1"):
        check_numel((2**62, 2))


def test_errors_inside_are_made_printable_once(tmp_path: Path) -> None:
    with pytest.raises(OperationError) as info, printable_errors(tmp_path):
        raise OperationError("bad key \x1b[2J")
    assert info.value.message == "bad key \\x1b[2J" and info.value.args == (info.value.message,)
    missing = tmp_path / "gone\x1b.pt"
    with pytest.raises(OperationError) as info, printable_errors(tmp_path):
        missing.open("rb")
    assert (
        info.value.message == f"{tmp_path}/gone\\x1b.pt: cannot read it (No such file or directory)"
    )
    with (
        pytest.raises(OperationError, match=f"^{tmp_path}: cannot read it"),
        printable_errors(tmp_path),
    ):
        raise OSError("no filename")
    with pytest.raises(KeyError), printable_errors(tmp_path):
        raise KeyError("not ours")
