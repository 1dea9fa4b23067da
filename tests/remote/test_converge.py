"""Two applies at once on a proxmox-lxc target (fakepve for the API, a real LXC container
reached by ssh → pct): one new generation, the waiting apply has nothing to do, and only
the apply that changes something takes a Proxmox snapshot, while it holds the root's lock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.remote.test_remote import envlock_env, lxc_profile, pve_api, snapshot_names

__all__ = ["lxc_profile"]  # the fixture, used by name below


def test_a_waiting_apply_on_a_container_takes_no_snapshot_and_builds_nothing(
    lxc_profile: tuple[Path, int], fakepve: Any, fakepve_url: str, fakepve_cafile: str
) -> None:
    profile, vmid = lxc_profile
    env = envlock_env()

    def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "envlock", *map(str, args)]
        return subprocess.run(argv, capture_output=True, text=True, env=env)

    first = cli("apply", "-y", profile)
    assert first.returncode == 0, first.stderr
    api = pve_api(fakepve_url, fakepve_cafile)
    # Each round a lock never built: one build to do, two applies to do it.
    changes = [('"tinydep==1.0"', '"tinydep==0.9"'), ('"trainutil"', '"trainutil", "sgl-kernel"')]
    rounds, raced = len(changes), 0
    for old, new in changes:
        profile.write_text(profile.read_text().replace(old, new))
        assert cli("lock", profile).returncode == 0
        before_snapshots = snapshot_names(api, vmid)
        before = json.loads(cli("generations", "--json", profile).stdout)["generations"]
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "envlock", "apply", "-y", str(profile)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=600) for proc in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, out + err
            assert "incomplete" not in out + err and "Traceback" not in err, out + err
        after = json.loads(cli("generations", "--json", profile).stdout)["generations"]
        assert len(after) == len(before) + 1, (before, after)
        said = sorted("nothing to do" in out for out, _ in outputs)
        assert said == [False, True], outputs
        taken = set(snapshot_names(api, vmid)) - set(before_snapshots)
        assert len(taken) == 1, (taken, outputs)
        (applied,) = [out for out, _ in outputs if "nothing to do" not in out]
        assert f"snapshot {taken.pop()}" in applied
        raced += any("planning again" in err for _, err in outputs)
        assert cli("check", profile).returncode == 0
    print(f"{raced} of {rounds} rounds: the waiting apply planned again under the lock")


def test_two_applies_with_a_pending_container_change_take_one_snapshot(
    lxc_profile: tuple[Path, int], fakepve: Any, fakepve_url: str, fakepve_cafile: str
) -> None:
    """Four rounds: the container's config drifts (cores), then two applies at once. The
    change and its snapshot are decided under the root's lock, checked again after the
    wait: exactly one snapshot a round, both applies exit 0, the config is the profile's."""
    profile, vmid = lxc_profile
    env = envlock_env()
    first = subprocess.run(
        [sys.executable, "-m", "envlock", "apply", "-y", str(profile)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert first.returncode == 0, first.stderr
    api = pve_api(fakepve_url, fakepve_cafile)
    for _ in range(4):
        api.nodes("pve1").lxc(vmid).config.put(cores=8)
        before = set(snapshot_names(api, vmid))
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "envlock", "apply", "-y", str(profile)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=600) for proc in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, out + err
            assert "Traceback" not in err, err
        taken = set(snapshot_names(api, vmid)) - before
        assert len(taken) == 1, (taken, outputs)
        assert api.nodes("pve1").lxc(vmid).config.get()["cores"] == 2
