"""The one gate for bytes from elsewhere (base/untrusted.py), in-process: each refusal in
envlock's words and classes (a shape, a link out, a size, a file that grew), the budget it
charges, and what it lets through. test_gate.py walks every reader through the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envlock.base import untrusted
from envlock.base.limits import MAX_BYTES, MiB, Refused, command_budget, printable
from envlock.errors import OperationError

SHAPE_HINT = (
    "envlock reads only regular files from elsewhere: replace it with the file it should be"
)


def size_hint(kind: str) -> str:
    return (
        f"no real {kind} comes near this size: the file is corrupt or built to exhaust time or "
        "memory (envlock's limits are listed on the docs' Security page)"
    )


def test_a_regular_file_is_opened_and_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"a": 1}')
    with untrusted.open_untrusted(path, "json") as handle:
        assert handle.read() == b'{"a": 1}'
    assert untrusted.read_untrusted(str(path), "json") == b'{"a": 1}'
    with pytest.raises(FileNotFoundError):
        untrusted.open_untrusted(tmp_path / "none", "json")


def test_a_fifo_is_refused_as_what_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "envlock-snapshot.json"
    os.mkfifo(fifo)
    with pytest.raises(untrusted.Unsafe) as raised:
        untrusted.open_untrusted(fifo, "snapshot")
    assert raised.value.message == f"refusing: {fifo} is a FIFO, not a regular file"
    assert raised.value.hint == SHAPE_HINT
    assert raised.value.what == f"{fifo} is a FIFO, not a regular file"
    assert raised.value.limit == ""
    moved = raised.value.at("in the snapshot")
    assert isinstance(moved, untrusted.Unsafe)
    assert moved.message == f"refusing: in the snapshot: {fifo} is a FIFO, not a regular file"
    assert moved.hint == SHAPE_HINT


def test_a_loop_of_links_is_an_operation_error_with_the_reason(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OperationError) as raised:
        untrusted.open_untrusted(loop, "json")
    assert not isinstance(raised.value, Refused)
    assert raised.value.message == f"{loop}: cannot read it (Too many levels of symbolic links)"


def test_a_member_linking_out_is_refused_unless_links_are_followed(tmp_path: Path) -> None:
    inside, outside = tmp_path / "ckpt", tmp_path / "elsewhere.json"
    inside.mkdir()
    outside.write_bytes(b"{}")
    member = inside / "config.json"
    member.symlink_to(outside)
    with pytest.raises(untrusted.Unsafe) as raised:
        untrusted.open_untrusted(member, "json", within=inside)
    assert raised.value.message == (f"refusing: {member} is a link out of {inside} (to {outside})")
    assert raised.value.hint == untrusted.FOLLOW_HINT
    with pytest.raises(untrusted.Unsafe) as custom:
        untrusted.read_untrusted(member, "json", within=inside, hint="say --follow")
    assert custom.value.hint == "say --follow"
    assert untrusted.read_untrusted(member, "json", within=inside, follow_links=True) == b"{}"
    assert untrusted.read_untrusted(member, "json") == b"{}"  # no directory: no boundary


def test_a_file_past_its_kind_s_size_is_refused_by_the_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"x" * 1001)
    monkeypatch.setitem(MAX_BYTES, "json", 1000)
    with pytest.raises(Refused) as raised:
        untrusted.open_untrusted(path, "json")
    assert not isinstance(raised.value, untrusted.Unsafe)
    assert raised.value.message == f"refusing: {path}: a json of 1,001 bytes exceeds 1,000 bytes"
    assert raised.value.hint == size_hint("json")
    monkeypatch.setitem(MAX_BYTES, "json", 1001)
    assert len(untrusted.read_untrusted(path, "json")) == 1001  # at the limit: read


def test_sizes_are_said_in_mib_from_one_mib_and_whole_gib_as_gib() -> None:
    assert untrusted._size(MiB) == "1 MiB"
    assert untrusted._size(3 * MiB + 5) == "3 MiB"
    assert untrusted._size(2048 * MiB) == "2 GiB"
    assert untrusted._size(1536 * MiB) == "1,536 MiB"
    assert untrusted._size(MiB - 1) == "1,048,575 bytes"


def test_a_file_that_grew_after_its_check_is_refused_and_reads_are_charged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "grown"
    path.write_bytes(b"y" * 12)
    with command_budget("diff") as spent, open(path, "rb") as handle:
        with pytest.raises(Refused) as raised:
            untrusted.read_counted(handle, 11, "lock", "the\nlock")
        assert raised.value.message == (
            "refusing: the\\nlock: a lock of more than 11 bytes exceeds 11 bytes"
        )
        assert raised.value.hint == size_hint("lock")
        assert spent.spent["bytes"] == 0  # refused before it is charged
        handle.seek(0)
        assert untrusted.read_counted(handle, 12, "lock", "x") == b"y" * 12
        assert spent.spent["bytes"] == 12
        assert untrusted.read_untrusted(path, "lock") == b"y" * 12
        assert spent.spent["bytes"] == 24


def test_a_spent_budget_reads_at_most_what_is_left(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"z" * 10)
    with command_budget("inspect") as spent:
        spent.spent["bytes"] = spent.left("bytes") + spent.spent["bytes"] - 4  # 4 left
        with open(path, "rb") as handle, pytest.raises(Refused) as raised:
            untrusted.read_counted(handle, 100, "json", "f")
        assert "the bytes read by this `inspect`" in raised.value.message
        assert spent.spent["bytes"] > spent.spent["bytes"] - 1


def long_dir(top: Path) -> Path:
    """A directory whose path is over 500 characters: messages cut it at 500."""
    place = top
    for number in range(6):
        place = place / (f"{number}" * 100)
    place.mkdir(parents=True)
    return place


def test_long_paths_are_cut_at_500_characters_in_every_message(tmp_path: Path) -> None:
    place = long_dir(tmp_path)
    fifo = place / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(untrusted.Unsafe) as shape:
        untrusted.open_untrusted(fifo, "json")
    assert (
        shape.value.message
        == f"refusing: {printable(str(fifo), 500)} is a FIFO, not a regular file"
    )
    loop = place / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OperationError) as looped:
        untrusted.open_untrusted(loop, "json")
    assert looped.value.message.startswith(f"{printable(str(loop), 500)}: cannot read it (")
    outside = long_dir(tmp_path / "elsewhere") / "x.json"
    outside.write_bytes(b"{}")
    member = place / "member.json"
    member.symlink_to(outside)
    with pytest.raises(untrusted.Unsafe) as out:
        untrusted.open_untrusted(member, "json", within=place)
    assert out.value.message == (
        f"refusing: {printable(str(member), 500)} is a link out of {printable(str(place), 500)} "
        f"(to {printable(str(outside), 500)})"
    )
    grown = place / "grown"
    grown.write_bytes(b"12345")
    with open(grown, "rb") as handle, pytest.raises(Refused) as refused:
        untrusted.read_counted(handle, 4, "json", str(grown))
    assert refused.value.message.startswith(f"refusing: {printable(str(grown), 500)}: a json of")


def test_a_read_past_the_command_s_budget_names_the_file(tmp_path: Path) -> None:
    place = long_dir(tmp_path)
    path = place / "f.json"
    path.write_bytes(b"z" * 10)
    with command_budget("diff") as spent:
        spent.spent["bytes"] += spent.left("bytes") - 4  # 4 bytes left
        with pytest.raises(Refused) as raised:
            untrusted.read_untrusted(path, "json")
    assert raised.value.message.startswith(f"refusing: {printable(str(path), 500)}: the bytes ")
