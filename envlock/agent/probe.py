"""The agent's probe: the state of a root and its active generation, in one JSON answer."""

import contextlib
import hashlib
import json
import os
import re
import sys
import time

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import (
        COMMANDS,
        HOLD,
        LOCK_COPY,
        MAX_ENV_HEADER,
        MAX_ENV_HEADERS,
        MAX_ENV_TEXT,
        MAX_READ_JSON,
        AgentError,
        UnsafeFile,
        current_generation,
        file_stats,
        list_generations,
        list_removals,
        open_untrusted,
        read_history,
        read_json,
        root_fingerprint,
        sha256_file,
        trust_facts,
        write_atomic,
    )
    from envlock.agent.cuda import cuda_major
    from envlock.agent.files import (
        canonical,
        site_packages,
        verify_files,
    )
    from envlock.agent.gpu import nvidia_facts


# -- probe --------------------------------------------------------------------------------
def generations_with_locks(root):
    """The root's generations, each saying whether its lock file is still beside it (a
    complete generation without one is what no lock can rebuild, as an adopted one)."""
    gens = list_generations(root)
    for gen in gens:
        lock = os.path.join(root, "generations", gen["name"], LOCK_COPY)
        gen["has_lock"] = os.path.isfile(lock)
    return gens


def root_busy(root):
    """What the process holding the root's lock (an apply, rollback or gc under way) wrote
    in it, while one holds it; None when nobody does. The lock is never taken."""
    try:
        fd = os.open(os.path.join(root, ".envlock.lock"), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        text = os.read(fd, 200).decode(errors="replace").strip()
        inode = os.fstat(fd).st_ino
    finally:
        os.close(fd)
    return (text or "holder unknown") if flock_held(text, inode) else None


def flock_held(text, inode):
    """Whether a process holds a flock on the file of `inode`: /proc/locks says (Linux; its
    pids may be another namespace's, so the inode alone decides); without it, whether the
    process the lock file names runs on this host."""
    try:
        # own: the kernel's table of locks (read, bounded, never taken)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read(1 << 20).splitlines()
    except OSError:
        match = re.match(r"pid (\d+) on (\S+)$", text)
        if not match or match.group(2) != os.uname().nodename:
            return False
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return True
    for line in lines:
        fields = line.split()
        held = "FLOCK" in fields and "->" not in fields and len(fields) > 5
        if held and fields[5].rsplit(":", 1)[-1] == str(inode):
            return True
    return False


def installed_distributions(site):
    """Name, version and requirements of every distribution in `site`, from the METADATA
    headers alone (the email parser importlib.metadata uses costs ~2 ms a package)."""
    found = {}  # type: dict
    try:
        entries = os.listdir(site)
    except OSError:
        return found
    for entry in entries:
        if entry.endswith(".dist-info"):
            headers = metadata_headers(os.path.join(site, entry, "METADATA"))
            if headers.get("name"):
                found[canonical(headers["name"][0])] = {
                    "version": headers.get("version", [""])[0],
                    "requires": headers.get("requires-dist", []),
                }
    return found


# What one probe reads of the environment's METADATA files: MAX_ENV_* (agent/core.py).
HEADER_BYTES = [0]  # read by this probe so far, in all METADATA files (one process a command)


def metadata_headers(path, wanted=("name", "version", "requires-dist")):
    """The wanted header fields of a core-metadata file (the part before the first blank
    line), each a list of values; continuation lines are not used by these fields. Read
    through the agent's gate (a regular file) and bounded: a wanted value past MAX_ENV_TEXT,
    a header part past MAX_ENV_HEADER or the probe's MAX_ENV_HEADERS is refused."""
    fields = {}  # type: dict
    try:
        handle = open_untrusted(path)
    except OSError:
        return fields
    with handle:
        read, partial, chunk = 0, False, MAX_ENV_TEXT + 64
        while True:
            raw = handle.readline(chunk)  # a line, or `chunk` bytes of a longer one
            read += len(raw)
            HEADER_BYTES[0] += len(raw)
            if read > MAX_ENV_HEADER or HEADER_BYTES[0] > MAX_ENV_HEADERS:
                limit = MAX_ENV_HEADER if read > MAX_ENV_HEADER else MAX_ENV_HEADERS
                raise AgentError(
                    "unsafe",
                    f"refusing: {path}: the METADATA headers read exceed {limit} bytes",
                )
            if not raw:
                break
            whole = raw.endswith(b"\n") or len(raw) < chunk
            if partial:  # the rest of a long line of a field not wanted: skipped
                partial = not whole
                continue
            line = raw.decode("utf-8", "replace")
            if not line.strip():
                break
            key, sep, value = line.partition(":")
            field = key.lower() if sep and not line[0].isspace() else None
            if field in wanted and (not whole or len(value.strip()) > MAX_ENV_TEXT):
                raise AgentError(
                    "unsafe",
                    f"refusing: {path}: its {key.strip()} value of more than {MAX_ENV_TEXT} "
                    f"characters exceeds {MAX_ENV_TEXT} characters",
                )
            if field in wanted:
                fields.setdefault(field, []).append(value.strip())
            partial = not whole
    return fields


def torch_build(dists, site):
    """torch's version, build label and CUDA from metadata and version.py, never importing it.

    PyPI's CUDA wheels carry no local label (metadata `2.11.0`, `torch.__version__`
    `2.11.0+cu130`): the label then comes from version.py's `__version__` (`reported`)."""
    info = dists.get("torch")
    if info is None:
        return None
    version = info["version"]
    build = {"version": version, "local": local_label(version)}
    build.update(version_py(os.path.join(site, "torch", "version.py")))
    build["local"] = build["local"] or local_label(build.get("reported") or "")
    majors = sorted(required_cuda_majors(info["requires"]))
    build["cuda_requires"] = ["cu" + m for m in majors]
    return build


def local_label(version):
    return version.split("+", 1)[1] if "+" in version else None


# version.py's names, and the probe's names for them.
VERSION_PY_KEYS = {
    "__version__": "reported",
    "cuda": "cuda",
    "hip": "hip",
    "git_version": "git_version",
}


def version_py(path):
    """torch/version.py's values, read as text; annotations (`cuda: Optional[str] = '13.0'`,
    `__version__: str = ...`) are tolerated."""
    try:
        with open_untrusted(path, 1 << 20) as handle:
            text = handle.read().decode("utf-8", errors="replace")
    except (OSError, UnsafeFile):
        return {}
    found = {}  # type: dict
    for key, field in VERSION_PY_KEYS.items():
        match = re.search(rf"^{key}\s*(?::\s*\S+\s*)?=\s*(.+)$", text, re.M)
        if match:
            value = match.group(1).strip()
            found[field] = None if value == "None" else value.strip("'\"")
    return found


# torch's own requirements name its CUDA build: its library families and, beside
# cuda-toolkit, cuda-bindings, pinned at the build's version (agent/cuda.py).
TORCH_PINNED = ("cuda-toolkit", "cuda-bindings")


def required_cuda_majors(requires):
    """The CUDA majors torch's own requirements name: its CUDA library families as -cuNN,
    or unsuffixed at a toolkit-versioned pin; cuda-toolkit's and cuda-bindings' pins.
    Other packages' -cuNN names (nvidia-cutlass-dsl-libs-cu12) are not torch's build."""
    majors = set()
    for req in requires:
        spec, _, marker = req.partition(";")
        if re.search(r"\bextra\s*==", marker):
            continue  # an optional extra's requirement says nothing about the build
        named = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?(.*)", spec)
        if named is None:
            continue
        pinned = re.search(r"(?:===?|~=|>=)\s*(\d+\.)", named.group(3))
        version = pinned.group(1) if pinned else ""
        major = cuda_major(canonical(named.group(1)), version, TORCH_PINNED)
        if major:
            majors.add(major)
    return majors


def cache_fingerprint(torch, dists, hardware):
    """The compile-cache key of a build: torch+label, triton, CUDA, GPUs."""
    if torch is None:
        return None
    parts = {
        "torch": torch["version"],
        "triton": (dists.get("triton") or dists.get("pytorch-triton") or {}).get("version"),
        "cuda": torch.get("cuda") or torch.get("hip"),
        "gpus": sorted(
            {
                "{} sm{}".format(g["name"], g["capability"].replace(".", ""))
                for g in hardware.get("gpus", [])
            }
        ),
    }
    text = json.dumps(parts, sort_keys=True)
    slug = "torch-" + re.sub(r"[^A-Za-z0-9.+_-]", "_", torch["version"])
    return {"parts": parts, "id": slug + "-" + hashlib.sha256(text.encode()).hexdigest()[:10]}


def cache_warmth(path):
    files = size = 0
    newest = 0.0
    for st in file_stats(path):
        files += 1
        size += st.st_size
        newest = max(newest, st.st_mtime)
    return {"files": files, "bytes": size, "last_used": newest or None}


def probe(req):
    root = req["root"]
    # First: a change after this point makes it stale, so a plan from what follows is
    # refused under the lock rather than executed against another root.
    fingerprint = root_fingerprint(root)
    trust = trust_facts(root, req.get("cache_dir"))
    ours = trust["root"] is None  # a root another user may write is neither read nor written
    # Asked before the root is read and again after: an operation that held the lock at
    # either moment may have changed it in between (switched, then let go), so the state is
    # reported busy, and the controller asks again, rather than taken as settled.
    busy_before = root_busy(root) if ours else None
    state = {
        "agent": 1,
        "root_fingerprint": fingerprint,
        "python": interpreter_facts(root),
        "hostname": os.uname().nodename,
        "machine": os.uname().machine,
        "libc": os.confstr("CS_GNU_LIBC_VERSION")
        if "CS_GNU_LIBC_VERSION" in os.confstr_names
        else None,
        "container": container_kind(),
        "root_exists": os.path.isdir(root),
        "generations": generations_with_locks(root) if ours else [],
        "removing": list_removals(root) if ours else [],
        "current": current_generation(root) if ours else None,
        "history": read_history(root, 20) if ours else [],
        "venv_link": link_state(req.get("venv"), root),
        "trust": trust,
    }
    state["hold"] = hold_state(root, state["current"]) if ours else None
    state["busy"] = busy_before or (root_busy(root) if ours else None)
    if state["current"] and (state["hold"] or req.get("active_lock")):
        # The active generation's own lock: what a hold is judged by, what a snapshot records.
        lock_path = os.path.join(root, "generations", state["current"], LOCK_COPY)
        state["active_lock"] = read_text(lock_path)
    gen_dir = os.path.realpath(state["python"]["prefix"])
    in_generation = (
        state["python"]["in_venv"]
        and state["current"] is not None
        and os.path.basename(gen_dir) == state["current"]
    )
    state["in_generation"] = in_generation
    state["hardware"] = nvidia_facts(devices=req.get("devices") or ())
    if in_generation:
        facts = generation_facts(gen_dir, state["hardware"])
        state.update(facts)
        if req.get("verify", True):
            state["files"] = verify_files(gen_dir, deep=req.get("deep", False))
        state["cache"] = cache_state(
            req.get("cache_dir"), facts["fingerprint"], full=req.get("warmth", False)
        )
        remember_warmth(root, state["cache"])
    state["scripts"] = scripts_state(req.get("scripts"))
    if req.get("startup"):  # `run`: whether <root>/startup/<version> is in place
        state["startup_ready"] = os.path.isfile(os.path.join(req["startup"], ".complete"))
    state["uv"] = uv_state(req.get("uv"))
    return state


def interpreter_facts(root):
    """The interpreter this probe runs in. envlock starts it with -S (envlock/base/pythons.py),
    so sys.prefix is the base interpreter's: the environment is found as site.py finds it,
    from a pyvenv.cfg beside or above sys.executable (the path it was started by)."""
    prefix = sys.prefix
    if sys.flags.no_site:
        exe_dir = os.path.dirname(os.path.abspath(sys.executable))
        top = os.path.dirname(exe_dir)
        if any(os.path.isfile(os.path.join(d, "pyvenv.cfg")) for d in (exe_dir, top)):
            prefix = top
    return {
        "version": "{}.{}.{}".format(*sys.version_info[:3]),
        "executable": sys.executable,
        "prefix": prefix,
        "in_venv": prefix != sys.base_prefix,
        "refused": refused_interpreter(root),
    }


def refused_interpreter(root):
    """The real file of the active generation's python when it lies inside the root: a
    venv's python links to a base interpreter, so that one was planted, and envlock's start
    line (envlock/base/pythons.py) ran the system python instead. None otherwise."""
    real = os.path.realpath(os.path.join(root, "current", "bin", "python"))
    inside = real.startswith(os.path.realpath(root) + os.sep)
    return real if inside and os.path.isfile(real) else None


def hold_state(root, current):
    """The rollback hold on the root, while it holds the active generation."""
    hold = read_json(os.path.join(root, HOLD))
    if not isinstance(hold, dict) or hold.get("generation") != current:
        return None
    return hold


def read_text(path):
    try:
        with open_untrusted(path, MAX_READ_JSON) as handle:
            return handle.read().decode("utf-8", errors="replace")
    except (OSError, UnsafeFile):
        return None


def container_kind():
    """'lxc', 'docker', … when this runs inside a container (as systemd detects it)."""
    try:
        # own: the system's, root-owned
        with open("/run/systemd/container") as handle:
            return handle.read().strip() or None
    except OSError:
        pass
    try:
        # own: the kernel's
        with open("/proc/1/environ", "rb") as handle:
            for item in handle.read().split(b"\0"):
                if item.startswith(b"container="):
                    return item.split(b"=", 1)[1].decode() or None
    except OSError:
        pass
    return None


def uv_state(spec):
    """Whether the bootstrapped uv is the one envlock pushed (sidecar record + stat)."""
    if not spec:
        return None
    record = read_json(spec["path"] + ".json") or {}
    try:
        st = os.stat(spec["path"])
    except OSError:
        return {"present": False, "ok": False}
    same_file = [st.st_size, st.st_mtime_ns] == [record.get("size"), record.get("mtime_ns")]
    return {
        "present": True,
        "ok": same_file and record.get("version") == spec["version"],
        "version": record.get("version"),
    }


def generation_facts(gen_dir, hardware):
    """Packages, torch build and cache fingerprint of a generation, read from its files."""
    site = site_packages(gen_dir) or gen_dir
    dists = installed_distributions(site)
    torch = torch_build(dists, site)
    return {
        "packages": {name: d["version"] for name, d in dists.items()},
        "torch": torch,
        "fingerprint": cache_fingerprint(torch, dists, hardware),
    }


def link_state(venv, root):
    if not venv:
        return None
    if os.path.islink(venv):
        return {"kind": "symlink", "target": os.readlink(venv)}
    if os.path.isdir(venv):
        # Whether `apply --adopt` could keep it: a venv holds pyvenv.cfg.
        return {"kind": "directory", "venv": os.path.isfile(os.path.join(venv, "pyvenv.cfg"))}
    if os.path.lexists(venv):
        return {"kind": "file"}
    return {"kind": "absent"}


def cache_state(cache_dir, fingerprint, full=False):
    """The build's cache dir. Counting a warm cache (thousands of files) is left to those
    who report it (snapshots); a check only needs to know whether any file is there."""
    if not cache_dir or fingerprint is None:
        return None
    path = os.path.join(cache_dir, fingerprint["id"])
    state = {"dir": path, "fingerprint": fingerprint, "exists": os.path.isdir(path)}
    if state["exists"]:
        state.update(cache_warmth(path) if full else {"files": int(any_file(path))})
    return state


def remember_warmth(root, cache):
    """Note, once, that a build's cache held files: a cache that then loses them went cold
    (the failure worth a warning); one that never held any is merely new."""
    if not cache:
        return
    path = os.path.join(root, "cache-seen.json")
    seen = read_json(path) or {}
    cache["was_warm"] = cache["fingerprint"]["id"] in seen
    if cache.get("files") and not cache["was_warm"]:
        seen[cache["fingerprint"]["id"]] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with contextlib.suppress(OSError):  # a read-only root: the warning is less precise
            write_atomic(path, json.dumps(seen, sort_keys=True).encode())


def any_file(path):
    return any(names for _, _, names in os.walk(path))


def scripts_state(spec):
    if not spec:
        return None
    found = {}  # type: dict
    for rel in spec["files"]:
        path = os.path.join(spec["dest"], rel)
        found[rel] = sha256_file(path) if os.path.isfile(path) else None
    return {"dest": spec["dest"], "hashes": found}


COMMANDS["probe"] = probe
