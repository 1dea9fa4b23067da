"""Every other file of a checkpoint directory is accounted for (issue #40): digested, or
past the bounds named as not compared (a few by name, the rest counted)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from envlock.checkpoint import otherfiles


def test_other_files_are_digested_and_past_the_bound_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"read by its reader")
    (tmp_path / "logs" / "deep").mkdir(parents=True)
    (tmp_path / "logs" / "deep" / "hparams.yaml").write_text("lr: 0.001\n")
    for i in range(30):
        (tmp_path / f"event-{i:02d}").write_bytes(b"x")
    monkeypatch.setattr(otherfiles, "MAX_FILES", 5)
    read = {(tmp_path / "model.safetensors").resolve()}
    digests, skipped = otherfiles.other_files(tmp_path, read, follow_links=False)
    assert set(digests) == {f"event-{i:02d}" for i in range(5)}
    assert digests["event-00"] == hashlib.sha256(b"x").hexdigest()
    assert len(skipped) == otherfiles.NAMED_SKIPPED + 1
    assert skipped[-1] == ("16 more files", "past 5 other files")  # 25 + hparams.yaml - 10
