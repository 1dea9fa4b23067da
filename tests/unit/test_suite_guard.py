"""The suite's own guard (tests/conftest.py): a test module that turns a host device into a
file, or writes into the checkout, fails by name. The guard's two checks, on planted shapes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests import conftest


def test_a_device_turned_into_a_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo, plain = tmp_path / "fifo", tmp_path / "null"
    os.mkfifo(fifo)
    plain.write_text("")
    monkeypatch.setattr(conftest, "HOST_DEVICES", (str(fifo), str(plain)))
    assert conftest.damaged_devices() == [str(fifo), str(plain)]


def test_the_host_devices_are_devices_now() -> None:
    assert conftest.damaged_devices() == []


def test_a_new_untracked_file_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    (checkout / ".gitignore").write_text("ignored\n")
    monkeypatch.setattr(conftest, "CHECKOUT", checkout)
    before = conftest.untracked_files()
    (checkout / "ignored").write_text("")
    (checkout / " \\ * ~ $HOME #x").write_text("")
    assert conftest.untracked_files() - before == {" \\ * ~ $HOME #x"}  # type: ignore[operator]


def test_outside_a_checkout_nothing_is_claimed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(conftest, "CHECKOUT", tmp_path)
    assert conftest.untracked_files() is None
