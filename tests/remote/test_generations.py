"""The generation semantics over a real ssh target (loopback sshd): a rollback holds, and a
stealthy edit is seen by the fast check and repaired, exactly as on the local target."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.cli.test_generations import stealthy_edit
from tests.remote.fixtures import Node
from tests.remote.test_remote import cli, ssh_target, write_profile


def test_rollback_hold_and_stealthy_repair_over_ssh(
    tmp_path: Path, wheelhouse: Path, node_sshd: Node
) -> None:
    root = tmp_path / "ssh root"
    target = ssh_target(root, tmp_path / "venv", node_sshd)
    profile = write_profile(tmp_path / "p", wheelhouse, target)
    assert cli("apply", "-y", profile).returncode == 0
    profile.write_text(profile.read_text().replace("tinydep==1.0", "tinydep==0.9"))
    assert cli("lock", profile).returncode == 0
    assert cli("apply", "-y", profile).returncode == 0

    assert cli("rollback", profile).returncode == 0
    held = cli("check", "--json", profile)
    assert held.returncode == 0, held.stdout
    assert json.loads(held.stdout)["hold"]["generation"].startswith("1-")
    assert cli("check", "--strict", profile).returncode == 1
    ran = cli("run", profile, "--", "python", "-c", "import tinydep; print(tinydep.VERSION)")
    assert ran.returncode == 0 and ran.stdout.strip() == "1.0"
    assert "rolled back: generation 1" in ran.stderr

    (gen,) = (root / "generations").glob("1-*")
    (target_file,) = gen.glob("lib/python3.*/site-packages/tinydep/__init__.py")
    stealthy_edit(target_file)
    drift = cli("check", "--json", profile)
    assert [d["kind"] for d in json.loads(drift.stdout)["drift"]] == ["file-modified"]
    assert cli("rollback", "--resync", profile).returncode == 0
    assert cli("check", "--deep", profile).returncode == 0

    assert cli("apply", "-y", profile).returncode == 0
    after = json.loads(cli("check", "--json", profile).stdout)
    assert after["hold"] is None and after["clean"]
    assert os.path.realpath(root / "current").endswith(after["generation"])
