"""The agent's GPU facts: the NVIDIA driver as this machine or container sees it.

Read from files only (the kernel module's /proc entries, /dev, the loader's directories) and
from `nvidia-smi` when it is installed: never torch, never a CUDA context, so a probe stays
cheap and works where CUDA itself would fail (an old driver, a library/module mismatch).
`root` is a prefix for every path, so tests can point it at a fake tree.

Shipped with the other agent modules into one namespace (reconcile/agentcall.py): stdlib only,
Python 3.8+, and every name here starts with `nvidia_` so none shadows another module's.
"""

import glob
import os
import re
import stat

# subprocess and shutil are imported where nvidia-smi runs: a probe on a machine without the
# driver (most checks in CI and on laptops) does not pay for them.

NVIDIA_PROC = "proc/driver/nvidia"
# Where the dynamic loader finds the user-space driver on the systems envlock targets, after
# LD_LIBRARY_PATH: Debian/Ubuntu multiarch, RHEL, plain /usr/lib, NVIDIA's container images,
# and WSL. /etc/ld.so.conf.d adds more (read below).
NVIDIA_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
)
# The driver package's libraries carry the driver's version in their file name
# (libcuda.so.580.159.04); their soname (.so.1) is a link to that file.
NVIDIA_LIBRARIES = ("libcuda", "libnvidia-ml")
NVIDIA_VERSION_RE = re.compile(r"(\d+\.\d+(?:\.\d+)?)")
NVIDIA_SUFFIX_RE = re.compile(r"\.so\.(\d+\.\d+(?:\.\d+)?)$")


def nvidia_facts(root="/", devices=()):
    """The driver's facts. `driver` (the kernel module's version) and `gpus` (nvidia-smi's
    name and compute capability) keep the shape snapshots and cache fingerprints rely on.

    `devices` are paths to report beyond /dev/nvidia* (a profile's declared device nodes)."""
    version_line = nvidia_read(root, NVIDIA_PROC + "/version").partition("\n")[0]
    driver = nvidia_module_version(version_line)
    boards = nvidia_boards(root) if driver else []
    dev = nvidia_devices(root, devices)
    libraries = nvidia_libraries(root)
    facts = {
        "driver": driver,
        "gpus": [],
        "module": version_line.partition(":")[2].strip() or None,
        "userspace": next((lib["version"] for lib in libraries.values() if lib["version"]), None),
        "libraries": libraries,
        "devices": dev,
        "boards": boards,
        "smi_error": None,
    }  # type: dict
    if driver:
        facts["gpus"], facts["smi_error"] = nvidia_smi(root)
    facts["gpu_count"] = nvidia_usable(boards, dev, facts["gpus"])
    return facts


def nvidia_read(root, rel):
    try:
        # own: the kernel's (/proc/driver/nvidia, under `root` in tests)
        with open(os.path.join(root, rel.lstrip("/"))) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError):
        return ""


def nvidia_module_version(line):
    """`NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul ...` or, for the
    open modules, `... Open Kernel Module for x86_64  580.159.04  Release Build ...`: the
    first version-shaped word after "Kernel Module"."""
    _, found, rest = line.partition("Kernel Module")
    match = NVIDIA_VERSION_RE.search(rest) if found else None
    return match.group(1) if match else None


def nvidia_boards(root):
    """The GPUs the driver lists, one /proc/driver/nvidia/gpus/<bus>/information each."""
    base = os.path.join(root, NVIDIA_PROC, "gpus")
    try:
        buses = sorted(os.listdir(base))
    except OSError:
        return []
    boards = []
    for bus in buses:
        info = nvidia_information(nvidia_read(root, f"{NVIDIA_PROC}/gpus/{bus}/information"))
        minor = info.get("Device Minor", "")
        boards.append(
            {
                "bus": info.get("Bus Location") or bus,
                "model": info.get("Model"),
                "uuid": info.get("GPU UUID"),
                "minor": int(minor) if minor.isdigit() else None,
                "excluded": info.get("GPU Excluded") == "Yes",
            }
        )
    return boards


def nvidia_information(text):
    """`Key: \\t value` lines, as the module's procfs writes them (nv-procfs.c)."""
    info = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip()] = value.strip()
    return info


def nvidia_devices(root, extra=()):
    """What each /dev/nvidia* node (and each path in `extra`) is here: char, file, …, missing."""
    dev = os.path.join(root, "dev")
    found = glob.glob(os.path.join(dev, "nvidia*")) + glob.glob(
        os.path.join(dev, "nvidia-caps", "*")
    )
    paths = {"/" + os.path.relpath(path, root) for path in found}
    paths.update(path for path in extra if path.startswith("/"))
    return {path: nvidia_node_kind(os.path.join(root, path.lstrip("/"))) for path in sorted(paths)}


def nvidia_node_kind(path):
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "missing"
    for kind, test in (
        ("char", stat.S_ISCHR),
        ("directory", stat.S_ISDIR),
        ("file", stat.S_ISREG),
        ("block", stat.S_ISBLK),
    ):
        if test(mode):
            return kind
    return "other"


def nvidia_lib_dirs(root):
    """The loader's search order, roughly: LD_LIBRARY_PATH, ld.so.conf(.d), the usual dirs."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    conf = ["etc/ld.so.conf"]
    conf += sorted(
        os.path.relpath(path, root)
        for path in glob.glob(os.path.join(root, "etc/ld.so.conf.d", "*.conf"))
    )
    for rel in conf:
        for line in nvidia_read(root, rel).splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("/"):  # `include` lines name the .d files read above
                dirs.append(line)
    dirs += NVIDIA_LIB_DIRS
    return sorted(set(dirs), key=dirs.index)  # first mention wins, as for the loader


def nvidia_libraries(root):
    """For libcuda and libnvidia-ml: the file the soname resolves to and the driver version
    its name carries, from the first directory that has it (None: not found)."""
    dirs = nvidia_lib_dirs(root)
    found = {}
    for name in NVIDIA_LIBRARIES:
        for directory in dirs:
            lib = nvidia_library(root, directory, name)
            if lib is not None:
                found[name] = lib
                break
    return found


def nvidia_library(root, directory, name):
    base = os.path.join(root, directory.lstrip("/"))
    target = nvidia_resolve(root, os.path.join(base, name + ".so.1"))
    if target is None:
        # No soname link (a half-installed driver): a single versioned file still tells
        # (name.so.X.Y…, as the glob `name.so.*.*` would find; a listing is ~10× cheaper
        # than glob's per-name match in a multiarch directory of thousands).
        prefix = name + ".so."
        try:
            names = os.listdir(base)
        except OSError:
            return None
        versions = sorted(n for n in names if n.startswith(prefix) and "." in n[len(prefix) :])
        if not versions:
            return None
        target = os.path.join(base, versions[-1])
    match = NVIDIA_SUFFIX_RE.search(os.path.basename(target))
    return {
        "path": "/" + os.path.relpath(target, root),
        "version": match.group(1) if match else None,
    }


def nvidia_resolve(root, path):
    """Follow symlinks inside `root` (an absolute target is taken under the root, as the
    loader inside that tree would see it); None when the chain ends nowhere."""
    for _ in range(16):
        try:
            link = os.readlink(path)
        except OSError:
            return path if os.path.isfile(path) else None
        if link.startswith("/"):
            path = os.path.join(root, link.lstrip("/"))
        else:
            path = os.path.normpath(os.path.join(os.path.dirname(path), link))
    return None


def nvidia_smi(root):
    """GPU names and compute capabilities from nvidia-smi when it is installed, and the
    first line of its complaint when it fails ("Failed to initialize NVML: …")."""
    import shutil
    import subprocess

    search = os.environ.get("PATH", "/usr/bin:/bin")
    path = os.pathsep.join(os.path.join(root, d.lstrip("/")) for d in search.split(os.pathsep))
    smi = shutil.which("nvidia-smi", path=path)
    if not smi:
        return [], None
    try:
        proc = subprocess.run(
            [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return [], str(exc)
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if proc.returncode != 0:
        return [], lines[0] if lines else f"nvidia-smi exited {proc.returncode}"
    gpus = []
    for line in lines:
        name, _, cap = line.rpartition(",")
        gpus.append({"name": name.strip(), "capability": cap.strip()})
    return gpus, None


def nvidia_usable(boards, devices, gpus):
    """The GPUs this machine can open: those the driver lists, not excluded, whose
    /dev/nvidia<minor> is a character device here. Inside an LXC container /proc shows every
    GPU of the host, so the device nodes passed through are what decide. Without /proc's list
    (some sandboxes hide it), nvidia-smi's count."""
    if not boards:
        return len(gpus)
    return sum(
        1
        for board in boards
        if not board["excluded"]
        and board["minor"] is not None
        and devices.get("/dev/nvidia{}".format(board["minor"])) == "char"
    )
