"""GPU device checks inside a real LXC container, through ssh -> pct -> lxc-attach.

The profile declares two GPU device nodes; the container gets a real character device for
the first (made inside it with mknod), then a plain file where the second should be. There
is no NVIDIA driver on this machine, so the count and the driver are reported too; only the
Proxmox API is fake (fakepve).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.remote.fixtures import Node
from tests.remote.test_remote import SECRET_ENV, TEMPLATE, cli, pct, ssh_lines, write_profile


def drift_of(result: Any) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for item in json.loads(result.stdout)["drift"]:
        found.setdefault(item["kind"], []).append(item)
    return found


def test_declared_gpu_nodes_inside_a_real_container(
    tmp_path: Path,
    wheelhouse: Path,
    node_sshd: Node,
    lxc_container: Any,
    fakepve: Any,
    fakepve_url: str,
    fakepve_cafile: str,
) -> None:
    vmid = lxc_container(mounts=[(wheelhouse, str(wheelhouse))])
    # The first GPU's node "passed through": a real character device in the container's /dev
    # (major 195, the NVIDIA module's), made by the container's root as a hook would.
    made = pct(node_sshd, vmid, "mknod", "/dev/nvidia0", "c", "195", "0")
    assert made.returncode == 0, made.stderr
    fakepve.store_file("local", TEMPLATE, 1, "vztmpl")
    target = [
        'type = "proxmox-lxc"',
        f'api-url = "{fakepve_url}"',
        'node = "pve1"',
        f"vmid = {vmid}",
        'api-user = "root@pam"',
        f'secret-env = "{SECRET_ENV}"',
        f'ca-file = "{fakepve_cafile}"',
        'root = "/opt/envlock"',
        'venv = "/opt/venv"',
        *ssh_lines(node_sshd),
    ]
    container = "\n".join(
        [
            "[container]",
            f'ostemplate = "local:vztmpl/{TEMPLATE}"',
            'rootfs = "local-lvm:8"',
            'devices = ["/dev/nvidia0", "/dev/nvidia1"]',
            f'mounts = [{{ source = "{wheelhouse}", path = "{wheelhouse}" }}]',
        ]
    )
    profile = write_profile(tmp_path / "p", wheelhouse, target, extra=container)

    # apply converges the environment; what only the node can fix does not fail it
    applied = cli("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    checked = cli("check", "--json", profile)
    assert checked.returncode == 1
    found = drift_of(checked)
    assert set(found) == {"gpu-driver", "gpu-device", "gpu-count"}
    assert [(d["subject"], d["actual"]) for d in found["gpu-device"]] == [
        ("/dev/nvidia1", "missing")
    ]
    assert (found["gpu-count"][0]["expected"], found["gpu-count"][0]["actual"]) == ("2", "0")
    assert found["gpu-driver"][0]["actual"] == "none"  # a cu128 build, no module loaded
    hardware = json.loads(checked.stdout)["gpu"]
    assert hardware["devices"]["/dev/nvidia0"] == "char"
    assert hardware["driver"] is None

    # Something creates a plain file where the second node belongs: still not a device.
    assert pct(node_sshd, vmid, "touch", "/dev/nvidia1").returncode == 0
    again = drift_of(cli("check", "--json", profile))
    assert [(d["subject"], d["actual"]) for d in again["gpu-device"]] == [
        ("/dev/nvidia1", "a regular file")
    ]
    refused = cli("run", profile, "--", "python3", "-c", "print('trained')")
    assert refused.returncode == 1 and "trained" not in refused.stdout
    assert "gpu-device" in refused.stderr
