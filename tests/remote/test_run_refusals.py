"""A remote `run` whose command cannot start (issue #47): 127 not found, 126 not executable,
said as envlock's own error document under --json, as a local run says them; through the
agent's one-call `run` and through the launcher (`--snapshot-into`), on an ssh target (the
loopback sshd). A command that itself ends with 127 is the command's: no document."""

from __future__ import annotations

import json
from pathlib import Path

from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, ssh_target, write_profile


def test_a_remote_command_that_cannot_start_is_a_json_document(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    root = tmp_path / "root"
    profile = write_profile(
        tmp_path / "p", wheelhouse, ssh_target(root, tmp_path / "venv", node_sshd)
    )
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    plain = tmp_path / "not-executable"
    plain.write_text("echo hi\n")
    plain.chmod(0o644)
    for n, how in enumerate(((), ("--snapshot-into", "snap"))):  # one call; the launcher
        how = tuple(str(tmp_path / f"{a}{n}") if a == "snap" else a for a in how)
        missing = cli("run", "--json", *how, profile, "--", "nosuchcmd")
        assert missing.returncode == 127, missing.stdout + missing.stderr
        doc = json.loads(missing.stdout)
        assert doc["exit"] == 127 and doc["error"].startswith("command not found: nosuchcmd")
        assert "envlock: command not found: nosuchcmd" in missing.stderr
        how = tuple(a.replace(f"snap{n}", f"snap{n}b") for a in how)
        denied = cli("run", "--json", *how, profile, "--", plain)
        assert denied.returncode == 126, denied.stdout + denied.stderr
        doc = json.loads(denied.stdout)
        assert doc["exit"] == 126 and doc["error"].startswith(f"not executable: {plain}")
        # The command's own 127 is the command's: no document, nothing of envlock's said.
        own = cli("run", "--json", profile, "--", "sh", "-c", "exit 127")
        assert own.returncode == 127 and own.stdout == "", own.stdout
    assert not list((root / "run").glob("*.refused"))  # read back and removed
    text = cli("run", profile, "--", "nosuchcmd")  # without --json: stderr only, as before
    assert text.returncode == 127 and text.stdout == ""
    assert "envlock: command not found: nosuchcmd" in text.stderr
