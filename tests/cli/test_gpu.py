"""GPU readiness: the agent's driver facts from real-format trees, the pure rules as a table,
and check/run/apply through the real CLI on this (driverless) machine.

The trees in tests/gpu_fixtures hold what /proc, the loader's directories and nvidia-smi show
on real GPU machines (see its README); the device nodes a tree needs are made here with
mknod, as root, in a copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlock.agent.gpu import nvidia_facts
from envlock.base.drift_kinds import KIND, Repair, blocking
from envlock.base.gpu_compat import MIN_DRIVER, min_driver, newest_major
from envlock.reconcile.agentcall import agent_bootstrap
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.gpu import NO_DRIVER_NOTE, gpu_drift, gpu_note
from envlock.reconcile.plan import make_plan
from envlock.reconcile.state import GpuFacts, GpuLibrary, TorchBuild, parse_state
from tests.conftest import Envlock
from tests.projects import write_seed_project
from tests.unit.test_core import expect, state

FIXTURES = Path(__file__).parents[1] / "gpu_fixtures"
NVIDIA_MAJOR = 195  # the kernel module's character-device major (nvidia-frontend)
GPU_KINDS = ("gpu-driver", "gpu-library", "gpu-device", "gpu-count")


def tree(tmp_path: Path, name: str | None, nodes: dict[str, str | int] | None = None) -> Path:
    """A copy of a fixture tree (or an empty root) with device nodes: path -> minor number
    for a real character device, or "file" for a plain file in its place."""
    root = tmp_path / (name or "bare")
    if name:
        shutil.copytree(FIXTURES / name, root, symlinks=True)
    root.mkdir(exist_ok=True)
    for path, what in (nodes or {}).items():
        node = root / path.lstrip("/")
        node.parent.mkdir(parents=True, exist_ok=True)
        if what == "file":
            node.write_text("")
        else:
            os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(NVIDIA_MAJOR, int(what)))
    return root


def gpu_nodes(count: int) -> dict[str, str | int]:
    nodes: dict[str, str | int] = {f"/dev/nvidia{i}": i for i in range(count)}
    return {**nodes, "/dev/nvidiactl": 255}


# -- the agent: facts from each tree ------------------------------------------------------


def test_one_h200_on_580(tmp_path: Path) -> None:
    root = tree(tmp_path, "h200-580", {**gpu_nodes(1), "/dev/nvidia-uvm": 0})
    facts = nvidia_facts(str(root))
    assert facts["driver"] == "580.159.04"
    assert facts["module"].startswith("NVIDIA UNIX Open Kernel Module for x86_64  580.159.04")
    assert facts["gpus"] == [{"name": "NVIDIA H200", "capability": "9.0"}]
    assert facts["userspace"] == "580.159.04"
    assert facts["libraries"] == {
        "libcuda": {
            "path": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04",
            "version": "580.159.04",
        },
        "libnvidia-ml": {
            "path": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04",
            "version": "580.159.04",
        },
    }
    assert facts["boards"] == [
        {
            "bus": "0000:18:00.0",
            "model": "NVIDIA H200",
            "uuid": "GPU-3f0c2b6e-8d1a-5f7e-9c4b-2a6d8e1f0b93",
            "minor": 0,
            "excluded": False,
        }
    ]
    assert facts["devices"] == {
        "/dev/nvidia-uvm": "char",
        "/dev/nvidia0": "char",
        "/dev/nvidiactl": "char",
    }
    assert (facts["gpu_count"], facts["smi_error"]) == (1, None)


def test_eight_gpus_on_the_proprietary_570_module(tmp_path: Path) -> None:
    facts = nvidia_facts(str(tree(tmp_path, "hgx8-570", gpu_nodes(8))))
    assert facts["driver"] == "570.172.08"
    assert facts["module"].startswith("NVIDIA UNIX x86_64 Kernel Module  570.172.08")
    assert len(facts["boards"]) == len(facts["gpus"]) == facts["gpu_count"] == 8
    assert [b["minor"] for b in facts["boards"]] == list(range(8))


def test_a_container_counts_only_the_gpus_passed_through(tmp_path: Path) -> None:
    # /proc inside an LXC container lists all of the host's GPUs; two nodes came through,
    # and a third path is a plain file someone created before the bind mount.
    root = tree(tmp_path, "hgx8-570", {**gpu_nodes(2), "/dev/nvidia2": "file"})
    facts = nvidia_facts(str(root), devices=("/dev/nvidia3",))
    assert len(facts["boards"]) == 8
    assert facts["gpu_count"] == 2
    assert facts["devices"]["/dev/nvidia2"] == "file"
    assert facts["devices"]["/dev/nvidia3"] == "missing"


def test_a_stale_user_space_driver_in_a_container(tmp_path: Path) -> None:
    facts = nvidia_facts(str(tree(tmp_path, "lxc-mismatch", gpu_nodes(8))))
    assert facts["driver"] == "580.159.04"
    assert facts["userspace"] == "570.172.08"
    assert facts["gpus"] == []
    assert facts["smi_error"] == "Failed to initialize NVML: Driver/library version mismatch"


def test_no_driver_no_gpus_but_declared_devices_are_still_looked_at(tmp_path: Path) -> None:
    facts = nvidia_facts(str(tree(tmp_path, None)), devices=("/dev/nvidia0",))
    assert facts == {
        "driver": None,
        "gpus": [],
        "module": None,
        "userspace": None,
        "libraries": {},
        "devices": {"/dev/nvidia0": "missing"},
        "boards": [],
        "smi_error": None,
        "gpu_count": 0,
    }


def test_the_loader_path_decides_which_user_space_driver_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tree(tmp_path, "lxc-mismatch")
    # A 580 driver unpacked elsewhere and named by ld.so.conf.d comes before the stale
    # multiarch copy; LD_LIBRARY_PATH comes before both. Absolute links stay in the tree.
    for where, version in (("opt/nvidia-580", "580.159.04"), ("opt/ldpath", "580.65.06")):
        lib = root / where
        lib.mkdir(parents=True)
        (lib / f"libcuda.so.{version}").write_text("")
        (lib / "libcuda.so.1").symlink_to(f"/{where}/libcuda.so.{version}")
    (root / "etc/ld.so.conf.d").mkdir(parents=True)
    (root / "etc/ld.so.conf.d/nvidia.conf").write_text("# driver\n/opt/nvidia-580\n")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    assert nvidia_facts(str(root))["libraries"]["libcuda"] == {
        "path": "/opt/nvidia-580/libcuda.so.580.159.04",
        "version": "580.159.04",
    }
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/ldpath")
    assert nvidia_facts(str(root))["userspace"] == "580.65.06"


def test_the_shipped_probe_reports_the_gpu_facts(tmp_path: Path) -> None:
    # Shipped as one namespace with the other agent modules, run by a real interpreter.
    proc = subprocess.run(
        [sys.executable, "-c", agent_bootstrap(), "probe"],
        input=json.dumps({"root": str(tmp_path / "root"), "devices": ["/dev/null"]}),
        capture_output=True,
        text=True,
        check=True,
    )
    hardware = json.loads(proc.stdout)["hardware"]
    assert hardware["devices"]["/dev/null"] == "char"
    assert {"driver", "gpus", "libraries", "boards", "gpu_count"} <= set(hardware)
    assert parse_state(json.loads(proc.stdout)).gpu.devices["/dev/null"] == "char"


def test_parsed_facts_feed_the_rules(tmp_path: Path) -> None:
    raw = {"hardware": nvidia_facts(str(tree(tmp_path, "lxc-mismatch", gpu_nodes(2))))}
    gpu = parse_state(raw).gpu
    assert (gpu.driver, gpu.listed, gpu.usable) == ("580.159.04", 8, 2)
    assert {lib.name: lib.version for lib in gpu.libraries} == {
        "libcuda": "570.172.08",
        "libnvidia-ml": "570.172.08",
    }
    assert gpu.smi_error == "Failed to initialize NVML: Driver/library version mismatch"


# -- the driver table -----------------------------------------------------------------------


def test_the_driver_table() -> None:
    assert MIN_DRIVER == {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
    assert (min_driver("12.8"), min_driver("13.0"), min_driver("14.0")) == (
        "525.60.13",
        "580.65.06",
        None,
    )
    assert (newest_major("570.172.08"), newest_major("580.65.06"), newest_major("418.39")) == (
        12,
        13,
        None,
    )


# -- the rules, table-driven ------------------------------------------------------------------

CU130 = TorchBuild("2.11.0+cu130", "cu130", "13.0", cuda_requires=("cu13",))
CU128 = TorchBuild("2.11.0+cu128", "cu128", "12.8", cuda_requires=("cu12",))
PYPI_CU13 = TorchBuild("2.11.0", None, "13.0", cuda_requires=("cu13",))
CPU = TorchBuild("2.13.0+cpu", "cpu", None)
LIB = "/usr/lib/x86_64-linux-gnu"


def libs(version: str, where: str = LIB) -> tuple[GpuLibrary, ...]:
    return (
        GpuLibrary("libcuda", f"{where}/libcuda.so.{version}", version),
        GpuLibrary("libnvidia-ml", f"{LIB}/libnvidia-ml.so.{version}", version),
    )


def node(driver: str | None = "580.159.04", gpus: int = 1, **changes: Any) -> GpuFacts:
    """A GPU machine in order: driver, matching libraries, `gpus` GPUs with their nodes."""
    devices = {f"/dev/nvidia{i}": "char" for i in range(gpus)}
    base: dict[str, Any] = {
        "driver": driver,
        "libraries": libs(driver) if driver else (),
        "devices": devices if driver else {},
        "listed": gpus if driver else 0,
        "usable": gpus if driver else 0,
    }
    return GpuFacts(**{**base, **changes})


EIGHT = tuple(f"/dev/nvidia{i}" for i in range(8))

RULES: list[tuple[str, GpuFacts, TorchBuild | None, tuple[str, ...], int | None, list[Any]]] = [
    # name, facts, torch, declared devices, [gpu] count, [(kind, subject, expected, actual)]
    ("in order", node(), CU130, (), None, []),
    (
        "driver too old for cu130",
        node("570.172.08"),
        CU130,
        (),
        None,
        [("gpu-driver", "NVIDIA driver", "≥ 580.65.06", "570.172.08")],
    ),
    ("cu128 runs on 570", node("570.172.08"), CU128, (), None, []),
    (
        "cu128 on a 520 driver",
        node("520.61.05"),
        CU128,
        (),
        None,
        [("gpu-driver", "NVIDIA driver", "≥ 525.60.13", "520.61.05")],
    ),
    (
        "PyPI's unlabelled CUDA 13 build",
        node("575.57.08"),
        PYPI_CU13,
        (),
        None,
        [("gpu-driver", "NVIDIA driver", "≥ 580.65.06", "575.57.08")],
    ),
    (
        "forward compatibility: cuda-compat's newer libcuda",
        node(
            "570.172.08",
            libraries=(
                GpuLibrary(
                    "libcuda", "/usr/local/cuda-13.0/compat/libcuda.so.580.65.06", "580.65.06"
                ),
                GpuLibrary("libnvidia-ml", f"{LIB}/libnvidia-ml.so.570.172.08", "570.172.08"),
            ),
        ),
        CU130,
        (),
        None,
        [],
    ),
    (
        # A container image's stale copy of a newer driver's user-space part, not cuda-compat:
        # the first CUDA call fails with "Driver/library version mismatch".
        "a newer libcuda outside compat/ is a mismatch",
        node("570.172.08", libraries=libs("580.65.06")),
        CU128,
        (),
        None,
        [
            ("gpu-library", f"{LIB}/libcuda.so.580.65.06", "570.172.08", "580.65.06"),
            ("gpu-library", f"{LIB}/libnvidia-ml.so.580.65.06", "570.172.08", "580.65.06"),
        ],
    ),
    (
        "container libraries older than the host module",
        node(libraries=libs("570.172.08"), smi_error="Failed to initialize NVML: Driver/…"),
        CU128,
        (),
        None,
        [
            ("gpu-library", f"{LIB}/libcuda.so.570.172.08", "580.159.04", "570.172.08"),
            ("gpu-library", f"{LIB}/libnvidia-ml.so.570.172.08", "580.159.04", "570.172.08"),
        ],
    ),
    (
        # Stale copies lower nothing: CUDA runs on the kernel module's driver.
        "stale container libraries under a new enough module",
        node(libraries=libs("570.172.08")),
        CU130,
        (),
        None,
        [
            ("gpu-library", f"{LIB}/libcuda.so.570.172.08", "580.159.04", "570.172.08"),
            ("gpu-library", f"{LIB}/libnvidia-ml.so.570.172.08", "580.159.04", "570.172.08"),
        ],
    ),
    (
        "one stale library after one in order",
        node(libraries=(libs("580.159.04")[0], libs("570.172.08")[1])),
        CU128,
        (),
        None,
        [("gpu-library", f"{LIB}/libnvidia-ml.so.570.172.08", "580.159.04", "570.172.08")],
    ),
    (
        # Only libcuda carries forward compatibility: a newer NVML under compat/ is no driver.
        "a newer libnvidia-ml under compat/ raises no driver",
        node(
            "570.172.08",
            libraries=(
                GpuLibrary("libcuda", f"{LIB}/libcuda.so.570.172.08", "570.172.08"),
                GpuLibrary(
                    "libnvidia-ml", "/usr/local/cuda/compat/libnvidia-ml.so.580.65.06", "580.65.06"
                ),
            ),
        ),
        CU130,
        (),
        None,
        [("gpu-driver", "NVIDIA driver", "≥ 580.65.06", "570.172.08")],
    ),
    (
        "no environment yet, a count declared",
        node(gpus=1),
        None,
        (),
        2,
        [("gpu-count", "GPUs", "2", "1")],
    ),
    (
        "no user-space driver at all",
        node(libraries=()),
        CU128,
        (),
        None,
        [("gpu-library", "libcuda.so.1", "580.159.04", "not found")],
    ),
    (
        "a declared device is missing, another is a plain file",
        node(gpus=8, devices={**{d: "char" for d in EIGHT[:6]}, EIGHT[6]: "file"}, usable=6),
        CU130,
        EIGHT,
        None,
        [
            ("gpu-device", "/dev/nvidia6", "character device", "a regular file"),
            ("gpu-device", "/dev/nvidia7", "character device", "missing"),
            ("gpu-count", "GPUs", "8", "6"),
        ],
    ),
    (
        "fewer GPUs than [gpu] count",
        node(gpus=8, usable=2),
        CU130,
        (),
        8,
        [("gpu-count", "GPUs", "8", "2")],
    ),
    ("[gpu] count wins over the device list", node(gpus=3), CU130, EIGHT[:2], 3, []),
    (
        "control nodes alone do not set a count",
        node(devices={"/dev/nvidia0": "char", "/dev/nvidiactl": "char"}, usable=0),
        CU130,
        ("/dev/nvidiactl",),
        None,
        [],
    ),
    ("a CPU build is not judged", node("470.256.02", libraries=libs("460.1")), CPU, (), None, []),
    ("no driver, nothing declared", node(None), CU130, (), None, []),
    ("no environment yet, nothing declared", node("470.256.02"), None, (), None, []),
    (
        "no driver, a count declared, CPU build",
        node(None),
        CPU,
        (),
        1,
        [("gpu-count", "GPUs", "1", "0")],
    ),
    (
        "no driver, a count declared, CUDA build",
        node(None),
        CU128,
        (),
        1,
        [
            ("gpu-driver", "NVIDIA driver", "≥ 525.60.13", "none"),
            ("gpu-count", "GPUs", "1", "0"),
        ],
    ),
]


@pytest.mark.parametrize(
    ("facts", "torch", "devices", "count", "found"),
    [r[1:] for r in RULES],
    ids=[r[0] for r in RULES],
)
def test_gpu_rules(
    facts: GpuFacts,
    torch: TorchBuild | None,
    devices: tuple[str, ...],
    count: int | None,
    found: list[tuple[str, str, str, str]],
) -> None:
    drifts = gpu_drift(facts, torch, devices, count)
    assert [(d.kind, d.subject, d.expected, d.actual) for d in drifts] == found


def details(facts: GpuFacts, torch: TorchBuild, count: int | None = None) -> list[str]:
    return [d.detail for d in gpu_drift(facts, torch, (), count)]


def test_the_messages_say_what_to_do() -> None:
    assert details(node("570.172.08"), CU130) == [
        "torch 2.11.0+cu130 needs an NVIDIA driver ≥ 580.65.06; the node has 570.172.08 — "
        "upgrade the host driver or use a cu128 build"
    ]
    assert details(node("575.57.08"), PYPI_CU13)[0].startswith(
        "torch 2.11.0 (CUDA 13.0) needs an NVIDIA driver ≥ 580.65.06"
    )
    library = details(node(libraries=libs("570.172.08")[:1], smi_error="Failed …"), CU128)
    assert library == [
        "user-space libcuda 570.172.08, kernel module 580.159.04: install the user-space "
        "driver 580.159.04 in the container (the host's installer with `--no-kernel-module`), "
        "or reboot a host whose driver was upgraded (nvidia-smi: Failed …)"
    ]
    assert details(node(gpus=8, usable=2), CU130, 8) == [
        "[gpu] count expects 8; the driver lists 8 GPU(s), 2 with their /dev/nvidiaN here"
    ]
    assert details(node(None), CU130, 1)[-1] == (
        "[gpu] count expects 1; no NVIDIA driver is loaded, so no GPU is visible"
    )


def test_each_kind_of_drift_says_what_to_do() -> None:
    assert details(node(None), CU128, 1)[0] == (
        "torch 2.11.0+cu128 needs an NVIDIA driver ≥ 525.60.13; no NVIDIA kernel module is "
        "loaded: install the driver on the host"
    )
    assert details(node(libraries=()), CU128) == [
        "the loader finds no libcuda.so.1: install the user-space driver 580.159.04 (the "
        "host's installer with `--no-kernel-module` in a container)"
    ]
    # A driver too old for every CUDA major in the table suggests no other build.
    assert details(node("418.39"), CU128) == [
        "torch 2.11.0+cu128 needs an NVIDIA driver ≥ 525.60.13; the node has 418.39 — "
        "upgrade the host driver"
    ]
    kinds = {"file": "a regular file", "directory": "a directory", "block": "a block device"}
    kinds |= {"other": "not a device", "socket": "socket"}
    devices = tuple(f"/dev/nvidia{i}" for i in range(len(kinds) + 1))
    facts = node(gpus=0, devices=dict(zip(devices[:-1], kinds, strict=True)), usable=0)
    drifts = gpu_drift(facts, CU128, devices)
    assert [(d.subject, d.actual) for d in drifts[:-1]] == [
        *zip(devices[:-1], kinds.values(), strict=True),
        (devices[-1], "missing"),
    ]
    assert drifts[0].detail == (
        "the path exists but is no device: something created it in the container before the "
        "node was passed through; remove it and restart the container"
    )
    assert drifts[-2].detail == (
        "[container] devices lists it, but the container has no such node: check that the "
        "node has it and restart the container"
    )
    assert drifts[-1].detail == (
        f"the /dev/nvidiaN in [container] devices expects {len(devices)}; the driver lists 0 "
        "GPU(s), 0 with their /dev/nvidiaN here"
    )


def test_the_no_driver_note_is_for_cuda_builds_only() -> None:
    assert gpu_note(node(None), CU128) == NO_DRIVER_NOTE
    assert gpu_note(node(None), CPU) is None
    assert gpu_note(node(None), None) is None
    assert gpu_note(node(None), CU128, expected_count=1) is None  # reported as drift instead
    assert gpu_note(node(), CU128) is None


def test_gpu_kinds_block_a_run_and_apply_leaves_them_alone() -> None:
    for kind in GPU_KINDS:
        assert KIND[kind].repair is Repair.REPORT and KIND[kind].blocks_run
    # test_core's in-sync target (torch 2.11.0+cu128) on a 520 driver, one GPU short
    gpu = node("520.61.05", gpus=2, usable=1)
    drifts = compute_drift(
        expect(devices=("/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2")), state(gpu=gpu)
    )
    assert [d.kind for d in drifts] == ["gpu-driver", "gpu-device", "gpu-count"]
    assert blocking(drifts) == drifts
    assert make_plan(expect(), state(gpu=gpu), drifts).empty


# -- through the CLI, on this machine (no NVIDIA driver) --------------------------------------


@pytest.fixture
def gpu_project(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> Path:
    """An applied cu128 project (the suite's torch 2.11.0+cu128 wheel) on the local target."""
    profile = write_seed_project(tmp_path / "proj", wheelhouse, scripts={})
    assert envlock("lock", profile).returncode == 0
    applied = envlock("apply", "-y", profile)
    assert applied.returncode == 0, applied.stderr
    return profile


def test_check_notes_the_missing_driver_once(gpu_project: Path, envlock: Envlock) -> None:
    human = envlock("check", gpu_project)
    assert human.returncode == 0, human.stdout + human.stderr
    assert human.stderr.count(NO_DRIVER_NOTE) == 1
    data = json.loads(envlock("check", "--json", gpu_project).stdout)
    assert data["clean"] and data["gpu"]["note"] == NO_DRIVER_NOTE
    assert data["gpu"]["driver"] is None and data["gpu"]["gpu_count"] == 0


def test_a_declared_gpu_count_is_drift_here_and_run_refuses(
    gpu_project: Path, envlock: Envlock, tmp_path: Path
) -> None:
    with gpu_project.open("a") as handle:
        handle.write("\n[gpu]\ncount = 1\n")
    assert envlock("lock", gpu_project).returncode == 0
    # apply converges what it can and does not fail on what only the node can fix
    applied = envlock("apply", "-y", gpu_project)
    assert applied.returncode == 0, applied.stderr
    checked = envlock("check", "--json", gpu_project)
    assert checked.returncode == 1
    found = {d["kind"]: d for d in json.loads(checked.stdout)["drift"]}
    assert set(found) == {"gpu-driver", "gpu-count"}
    assert (found["gpu-count"]["expected"], found["gpu-count"]["actual"]) == ("1", "0")
    assert json.loads(checked.stdout)["gpu"]["note"] is None
    refused = envlock("run", gpu_project, "--", "python", "-c", "print('trained')")
    assert refused.returncode == 1 and "trained" not in refused.stdout
    assert "gpu-count" in refused.stderr
    # --allow-drift runs anyway; the snapshot records the new facts with the old ones
    snap = tmp_path / "snap"
    ran = envlock(
        "run", "--allow-drift", "--snapshot-into", snap, gpu_project, "--", "python", "-c", "0"
    )
    assert ran.returncode == 0, ran.stderr
    hardware = json.loads((snap / "envlock-snapshot.json").read_text())["hardware"]
    assert hardware["driver"] is None and hardware["gpus"] == []
    assert hardware["gpu_count"] == 0 and "devices" in hardware and "libraries" in hardware


def test_a_non_gpu_device_is_no_gpu_declaration() -> None:
    """/dev/fuse passed through on a driverless machine: checked to exist, no driver drift."""
    from envlock.reconcile.gpu import gpu_drift, gpus_declared

    assert not gpus_declared(("/dev/fuse", "/dev/null"), None)
    assert gpus_declared(("/dev/nvidia0",), None) and gpus_declared((), 2)
    facts = GpuFacts(devices={"/dev/fuse": "char"})
    assert gpu_drift(facts, CU130, ("/dev/fuse",), None) == []
    missing = gpu_drift(GpuFacts(), CU130, ("/dev/fuse",), None)
    assert [d.kind for d in missing] == ["gpu-device"]
