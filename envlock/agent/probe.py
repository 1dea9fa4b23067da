"""The agent's probe: the state of a root and its active generation, in one JSON answer."""

import hashlib
import json
import os
import re
import sys

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import (
        COMMANDS,
        current_generation,
        list_generations,
        read_history,
        read_json,
        sha256_file,
    )
    from envlock.agent.files import (
        canonical,
        site_packages,
        verify_files,
    )
    from envlock.agent.gpu import nvidia_facts


# -- probe --------------------------------------------------------------------------------
def installed_distributions(site):
    from importlib import metadata

    found = {}
    for dist in metadata.distributions(path=[site]):
        name = dist.metadata["Name"]
        if name:
            found[canonical(name)] = {
                "version": dist.version,
                "requires": list(dist.requires or []),
            }
    return found


def torch_build(dists, site):
    """torch's version, local label and CUDA from metadata and version.py, never importing it."""
    info = dists.get("torch")
    if info is None:
        return None
    version = info["version"]
    build = {"version": version, "local": version.split("+", 1)[1] if "+" in version else None}
    candidate = os.path.join(site, "torch", "version.py")
    if os.path.isfile(candidate):
        with open(candidate) as handle:
            text = handle.read()
        for key in ("cuda", "hip", "git_version"):
            match = re.search(rf"^{key}\s*(?::\s*\S+\s*)?=\s*(.+)$", text, re.M)
            if match:
                value = match.group(1).strip()
                build[key] = None if value == "None" else value.strip("'\"")
    majors = sorted(
        {
            m.group(1)
            for req in info["requires"]
            for m in [re.match(r"nvidia-[a-z0-9-]+-cu(\d+)", canonical(req))]
            if m
        }
    )
    build["cuda_requires"] = ["cu" + m for m in majors]
    return build


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
    for dirpath, _, names in os.walk(path):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            files += 1
            size += st.st_size
            newest = max(newest, st.st_mtime)
    return {"files": files, "bytes": size, "last_used": newest or None}


def probe(req):
    root = req["root"]
    state = {
        "agent": 1,
        "python": {
            "version": "{}.{}.{}".format(*sys.version_info[:3]),
            "executable": sys.executable,
            "prefix": sys.prefix,
            "in_venv": sys.prefix != sys.base_prefix,
        },
        "hostname": os.uname().nodename,
        "machine": os.uname().machine,
        "libc": os.confstr("CS_GNU_LIBC_VERSION")
        if "CS_GNU_LIBC_VERSION" in os.confstr_names
        else None,
        "container": container_kind(),
        "root_exists": os.path.isdir(root),
        "generations": list_generations(root),
        "current": current_generation(root),
        "history": read_history(root, 20),
        "venv_link": link_state(req.get("venv"), root),
    }
    in_generation = (
        state["python"]["in_venv"]
        and state["current"] is not None
        and os.path.basename(os.path.realpath(sys.prefix)) == state["current"]
    )
    state["in_generation"] = in_generation
    state["hardware"] = nvidia_facts(devices=req.get("devices") or ())
    if in_generation:
        gen_dir = os.path.realpath(sys.prefix)
        facts = generation_facts(gen_dir, state["hardware"])
        state.update(facts)
        if req.get("verify", True):
            state["files"] = verify_files(gen_dir, deep=req.get("deep", False))
        state["cache"] = cache_state(
            req.get("cache_dir"), facts["fingerprint"], full=req.get("warmth", False)
        )
    state["scripts"] = scripts_state(req.get("scripts"))
    state["uv"] = uv_state(req.get("uv"))
    return state


def container_kind():
    """'lxc', 'docker', … when this runs inside a container (as systemd detects it)."""
    try:
        with open("/run/systemd/container") as handle:
            return handle.read().strip() or None
    except OSError:
        pass
    try:
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
        return {"kind": "directory"}
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


def any_file(path):
    return any(names for _, _, names in os.walk(path))


def scripts_state(spec):
    if not spec:
        return None
    found = {}
    for rel in spec["files"]:
        path = os.path.join(spec["dest"], rel)
        found[rel] = sha256_file(path) if os.path.isfile(path) else None
    return {"dest": spec["dest"], "hashes": found}


COMMANDS["probe"] = probe
