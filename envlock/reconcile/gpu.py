"""GPU readiness: whether the target's NVIDIA driver can run the environment. Pure.

An environment can be exactly the locked one and still fail at its first CUDA call: the
node's driver is older than the torch build's CUDA needs, the container's user-space driver
is another version than the host's kernel module, a declared /dev/nvidiaN is missing, or
fewer GPUs are visible than expected. None of that is the environment's: the kinds are
declared in kinds.py as REPORT (apply leaves them alone), and a run refuses on them.

CPU builds and machines without a driver are not judged, unless the profile declares device
nodes or a GPU count: then the user said GPUs belong there.
"""

from __future__ import annotations

import re

from envlock.base.drift_kinds import Drift
from envlock.base.gpu_compat import SUGGESTED_LABEL, driver_version, min_driver, newest_major
from envlock.reconcile.state import GpuFacts, GpuLibrary, TorchBuild

NO_DRIVER_NOTE = "no NVIDIA driver: skipping GPU checks"
NUMBERED_GPU = re.compile(r"^/dev/nvidia\d+$")
NODE_WORDS = {
    "missing": "missing",
    "file": "a regular file",
    "directory": "a directory",
    "block": "a block device",
    "other": "not a device",
}


def gpu_drift(
    gpu: GpuFacts,
    torch: TorchBuild | None,
    devices: tuple[str, ...] = (),
    expected_count: int | None = None,
) -> list[Drift]:
    """Every way the GPU side keeps this environment from training."""
    cuda = torch.cuda if torch is not None else None
    declared = gpus_declared(devices, expected_count)
    if not declared and (not cuda or gpu.driver is None):
        # Other passed-through nodes (/dev/fuse, …) must still exist.
        return device_drift(gpu, devices)
    drifts = driver_drift(gpu, torch) if torch is not None and cuda else []
    drifts += library_drift(gpu, needs_cuda=bool(cuda))
    drifts += device_drift(gpu, devices)
    drifts += count_drift(gpu, devices, expected_count)
    return drifts


def gpus_declared(devices: tuple[str, ...], expected_count: int | None) -> bool:
    """The profile expects NVIDIA GPUs: a count, or an NVIDIA node passed through."""
    return expected_count is not None or any(d.startswith("/dev/nvidia") for d in devices)


def gpu_note(
    gpu: GpuFacts,
    torch: TorchBuild | None,
    devices: tuple[str, ...] = (),
    expected_count: int | None = None,
) -> str | None:
    """What check says when it skips the GPU: a CUDA build, no driver, no GPU declared.
    (A CPU build's user has no reason to hear about drivers.)"""
    declared = gpus_declared(devices, expected_count)
    if torch is not None and torch.cuda and gpu.driver is None and not declared:
        return NO_DRIVER_NOTE
    return None


def driver_drift(gpu: GpuFacts, torch: TorchBuild) -> list[Drift]:
    need = min_driver(torch.cuda or "")
    if need is None:
        return []  # a CUDA major newer than the table: nothing to compare with
    build = torch.version if "+" in torch.version else f"{torch.version} (CUDA {torch.cuda})"
    wants = f"torch {build} needs an NVIDIA driver ≥ {need}"
    if gpu.driver is None:
        detail = f"{wants}; no NVIDIA kernel module is loaded: install the driver on the host"
        return [Drift("gpu-driver", "NVIDIA driver", f"≥ {need}", "none", detail)]
    have = effective_driver(gpu)
    if driver_version(have) >= driver_version(need):
        return []
    detail = f"{wants}; the node has {have} — upgrade the host driver"
    major = newest_major(have)
    if major is not None and major in SUGGESTED_LABEL:
        detail += f" or use a {SUGGESTED_LABEL[major]} build"
    return [Drift("gpu-driver", "NVIDIA driver", f"≥ {need}", have, detail)]


def effective_driver(gpu: GpuFacts) -> str:
    """The driver CUDA runs on: the kernel module's, unless NVIDIA's forward-compatibility
    package supplies a newer libcuda (cuda-compat, under a .../compat/ directory)."""
    assert gpu.driver is not None
    newer = [
        lib.version
        for lib in gpu.libraries
        if lib.name == "libcuda" and lib.version and forward_compat(lib, gpu.driver)
    ]
    return newer[0] if newer else gpu.driver


def forward_compat(lib: GpuLibrary, module: str) -> bool:
    return (
        "/compat/" in lib.path
        and lib.version is not None
        and driver_version(lib.version) > driver_version(module)
    )


def library_drift(gpu: GpuFacts, *, needs_cuda: bool) -> list[Drift]:
    """The user-space driver the loader finds against the kernel module: after a host driver
    upgrade, a container's copy goes stale ("Driver/library version mismatch")."""
    module = gpu.driver
    if module is None:
        return []
    drifts = []
    for lib in gpu.libraries:
        if lib.version is None or lib.version == module or forward_compat(lib, module):
            continue
        detail = (
            f"user-space {lib.name} {lib.version}, kernel module {module}: install the "
            f"user-space driver {module} in the container (the host's installer with "
            "`--no-kernel-module`), or reboot a host whose driver was upgraded"
        )
        if gpu.smi_error:
            detail += f" (nvidia-smi: {gpu.smi_error})"
        drifts.append(Drift("gpu-library", lib.path, module, lib.version, detail))
    if needs_cuda and not any(lib.name == "libcuda" for lib in gpu.libraries):
        detail = (
            f"the loader finds no libcuda.so.1: install the user-space driver {module} "
            "(the host's installer with `--no-kernel-module` in a container)"
        )
        drifts.append(Drift("gpu-library", "libcuda.so.1", module, "not found", detail))
    return drifts


def device_drift(gpu: GpuFacts, devices: tuple[str, ...]) -> list[Drift]:
    """Each device node the profile passes through must be a character device inside."""
    drifts = []
    for path in devices:
        kind = gpu.devices.get(path, "missing")
        if kind == "char":
            continue
        if kind == "missing":
            detail = (
                "[container] devices lists it, but the container has no such node: "
                "check that the node has it and restart the container"
            )
        else:
            detail = (
                "the path exists but is no device: something created it in the container "
                "before the node was passed through; remove it and restart the container"
            )
        drifts.append(
            Drift("gpu-device", path, "character device", NODE_WORDS.get(kind, kind), detail)
        )
    return drifts


def count_drift(gpu: GpuFacts, devices: tuple[str, ...], expected_count: int | None) -> list[Drift]:
    """As many GPUs usable as declared: [gpu] count, else the /dev/nvidiaN passed through."""
    numbered = [d for d in devices if NUMBERED_GPU.match(d)]
    want = expected_count if expected_count is not None else len(numbered) or None
    if want is None or gpu.usable == want:
        return []
    source = (
        "[gpu] count" if expected_count is not None else "the /dev/nvidiaN in [container] devices"
    )
    if gpu.driver is None:
        seen = "no NVIDIA driver is loaded, so no GPU is visible"
    else:
        seen = f"the driver lists {gpu.listed} GPU(s), {gpu.usable} with their /dev/nvidiaN here"
    return [
        Drift("gpu-count", "GPUs", str(want), str(gpu.usable), f"{source} expects {want}; {seen}")
    ]
