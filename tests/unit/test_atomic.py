"""The controller's atomic writes (base/atomic.py): the agent's rule with envlock's types
and errors. The shapes a destination may take are tests/trust/test_writes.py's; here each
entry point, its default mode and the errors it raises."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from envlock.agent import core
from envlock.base import atomic
from envlock.errors import OperationError, UsageError


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_atomic_replaces_a_file_with_the_mode_asked(tmp_path: Path) -> None:
    path = tmp_path / "f"
    atomic.write_atomic(path, b"one")
    assert path.read_bytes() == b"one" and mode(path) == 0o644
    atomic.write_atomic(str(path), b"two", 0o600)
    assert path.read_bytes() == b"two" and mode(path) == 0o600
    assert os.listdir(tmp_path) == ["f"]  # no temp file left beside it


def test_write_new_never_replaces(tmp_path: Path) -> None:
    path = tmp_path / "n"
    atomic.write_new(path, b"first")
    assert path.read_bytes() == b"first" and mode(path) == 0o644
    with pytest.raises(FileExistsError):
        atomic.write_new(str(path), b"second", 0o600)
    assert path.read_bytes() == b"first"
    other = tmp_path / "m"
    atomic.write_new(other, b"x", 0o600)
    assert mode(other) == 0o600


def test_what_is_not_a_regular_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(atomic.NotRegularFile) as raised:
        atomic.write_atomic(fifo, b"x")
    assert isinstance(raised.value, UsageError) and str(fifo) in raised.value.message
    with pytest.raises(FileExistsError):  # write_new: it exists, whatever it is
        atomic.write_new(fifo, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and os.listdir(tmp_path) == ["pipe"]


def test_refuse_non_regular_passes_a_file_or_nothing(tmp_path: Path) -> None:
    atomic.refuse_non_regular(str(tmp_path / "absent"))
    (tmp_path / "file").write_text("")
    atomic.refuse_non_regular(str(tmp_path / "file"))
    (tmp_path / "link").symlink_to(tmp_path / "file")
    with pytest.raises(atomic.NotRegularFile):
        atomic.refuse_non_regular(str(tmp_path / "link"))


def test_the_agent_s_other_refusals_are_operation_errors() -> None:
    with pytest.raises(OperationError) as raised, atomic.envlock_errors():
        raise core.AgentError("write", "the temp file was replaced")
    assert not isinstance(raised.value, UsageError)
    assert raised.value.message == "the temp file was replaced"
    with pytest.raises(atomic.NotRegularFile) as refused, atomic.envlock_errors():
        raise core.AgentError("not-regular", "a FIFO")
    assert refused.value.message == "a FIFO"
    with pytest.raises(PermissionError), atomic.envlock_errors():
        raise PermissionError("stays the caller's")
