"""The target-side agent: stdlib only, shipped to the target in one command line.

It runs with the environment's own interpreter (probe) or the target's python3 (apply),
reads a JSON request on stdin and prints JSON on stdout, so gathering state costs one round
trip over any transport. It never imports torch: versions come from dist-info metadata and
`torch/version.py` is read as text.

Compatible with Python 3.8+ (the target's interpreter is not ours to choose).
"""

import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

META_DIR = ".envlock"
MANIFEST = META_DIR + "/manifest.json"
GENERATION = META_DIR + "/generation.json"
LOCK_COPY = META_DIR + "/pylock.toml"
GEN_RE = re.compile(r"^(\d+)-([0-9a-f]{12})$")


# -- small helpers ------------------------------------------------------------------------
def sha256_file(path, bufsize=1 << 20):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(bufsize)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def record_hash(path):
    """sha256 in RECORD's urlsafe-base64 form."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def write_atomic(path, data):
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def symlink_atomic(link, target):
    tmp = f"{link}.{os.getpid()}.tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


def read_json(path, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def progress(message):
    sys.stderr.write(f"envlock-progress: {message}\n")
    sys.stderr.flush()


# -- generations --------------------------------------------------------------------------
def list_generations(root):
    gens = []  # type: list
    base = os.path.join(root, "generations")
    try:
        names = os.listdir(base)
    except OSError:
        return gens
    for name in names:
        match = GEN_RE.match(name)
        if not match:
            continue
        path = os.path.join(base, name)
        meta = read_json(os.path.join(path, GENERATION))
        gens.append(
            {
                "number": int(match.group(1)),
                "name": name,
                "lock_hash": match.group(2),
                "complete": meta is not None,
                "meta": meta or {},
            }
        )
    gens.sort(key=lambda g: g["number"])
    return gens


def current_generation(root):
    try:
        target = os.readlink(os.path.join(root, "current"))
    except OSError:
        return None
    return os.path.basename(target.rstrip("/"))


def read_history(root, limit=200):
    try:
        with open(os.path.join(root, "history.jsonl")) as handle:
            lines = handle.readlines()[-limit:]
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def append_history(root, entry):
    entry = dict(entry, time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    fd = os.open(os.path.join(root, "history.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)


def dir_size(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


# -- venv content -------------------------------------------------------------------------
def walk_files(venv, prefix=""):
    """Every file and symlink under a directory, relative (to it, plus `prefix`), envlock's
    own metadata and bytecode caches left out."""
    found = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = os.scandir(os.path.join(venv, rel_dir))
        except OSError:
            continue
        with entries:
            for entry in entries:
                rel = rel_dir + "/" + entry.name if rel_dir else entry.name
                if (not prefix and rel == META_DIR) or entry.name == "__pycache__":
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(rel)
                    continue
                st = entry.stat(follow_symlinks=False)
                key = prefix + "/" + rel if prefix else rel
                found[key] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_nlink]
    return found


def site_packages(venv):
    lib = os.path.join(venv, "lib")
    try:
        for name in sorted(os.listdir(lib)):
            candidate = os.path.join(lib, name, "site-packages")
            if name.startswith("python") and os.path.isdir(candidate):
                return candidate
    except OSError:
        pass
    return None


def read_records(venv):
    """Map venv-relative path -> (dist name, RECORD hash or '') from every dist-info RECORD."""
    site = site_packages(venv)
    owners = {}  # type: dict
    if site is None:
        return owners
    site_rel = os.path.relpath(site, venv)
    for name in os.listdir(site):
        if not name.endswith(".dist-info"):
            continue
        dist = canonical(name[: -len(".dist-info")].rsplit("-", 1)[0])
        try:
            with open(os.path.join(site, name, "RECORD")) as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.rsplit(",", 2)
            if len(parts) != 3 or not parts[0]:
                continue
            path = os.path.normpath(os.path.join(site_rel, parts[0]))
            digest = parts[1].split("=", 1)[1] if parts[1].startswith("sha256=") else ""
            owners[path] = (dist, digest)
    return owners


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def write_manifest(venv):
    """Stat manifest of every file, with owners; sha256 only for files no RECORD covers."""
    owners = read_records(venv)
    files = walk_files(venv)
    entries = {}
    for rel, (size, mtime, ino, _) in files.items():
        dist, digest = owners.get(rel, ("", ""))
        entry = [size, mtime, ino, dist]
        if not digest:
            entry.append(
                sha256_file(os.path.join(venv, rel))
                if not os.path.islink(os.path.join(venv, rel))
                else "link:" + os.readlink(os.path.join(venv, rel))
            )
        entries[rel] = entry
    os.makedirs(os.path.join(venv, META_DIR), exist_ok=True)
    write_atomic(os.path.join(venv, MANIFEST), json.dumps({"files": entries}).encode())
    return len(entries)


def verify_files(venv, deep=False):
    """Compare a generation with its manifest.

    Fast mode lstat()s each recorded file and hashes only those whose size, mtime or inode
    moved; deep mode hashes every file against the wheels' RECORDs (in threads: hashlib
    releases the GIL, so this keeps up with sha256sum).
    """
    manifest = read_json(os.path.join(venv, MANIFEST))
    if manifest is None:
        return {"error": "no manifest"}
    expected = manifest["files"]
    prefix = venv + os.sep
    lstat = os.lstat
    suspects, missing = [], []
    for rel, entry in expected.items():
        try:
            st = lstat(prefix + rel)
        except OSError:
            missing.append({"path": rel, "dist": entry[3]})
            continue
        if deep or st.st_size != entry[0] or st.st_mtime_ns != entry[1] or st.st_ino != entry[2]:
            suspects.append((rel, entry, st.st_nlink))
    owners = read_records(venv) if suspects else {}
    changed = []
    verdicts = judge_all(venv, suspects, owners, deep)
    for (rel, entry, links), verdict in zip(suspects, verdicts):  # noqa: B905 (py3.8)
        if verdict is not None:
            changed.append({"path": rel, "dist": entry[3], "why": verdict, "links": links})
    added = added_files(venv, expected)
    if added:
        owners = owners or read_records(venv)
        for item in added:
            item["dist"] = owners.get(item["path"], ("", ""))[0]
    return {
        "modified": changed,
        "missing": missing,
        "added": added,
        "checked": len(expected),
        "deep": bool(deep),
    }


def judge_all(venv, suspects, owners, deep):
    if not deep or len(suspects) < 64:
        return [content_verdict(venv, rel, entry, owners) for rel, entry, _ in suspects]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(
            pool.map(lambda s: content_verdict(venv, s[0], s[1], owners), suspects, chunksize=32)
        )


def added_files(venv, expected):
    """Files present in the venv that the manifest does not know (new dirs walked whole)."""
    known_dirs = {""}
    for rel in expected:
        parts = rel.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            known_dirs.add("/".join(parts[:depth]))
    added = []
    for rel_dir in known_dirs:
        try:
            names = os.listdir(os.path.join(venv, rel_dir))
        except OSError:
            continue
        for name in names:
            rel = rel_dir + "/" + name if rel_dir else name
            if rel in expected or rel in known_dirs or name == "__pycache__" or rel == META_DIR:
                continue
            path = os.path.join(venv, rel)
            if os.path.isdir(path) and not os.path.islink(path):
                added += [
                    {"path": sub, "pth": sub.endswith(".pth")} for sub in walk_files(path, rel)
                ]
            else:
                added.append({"path": rel, "pth": rel.endswith(".pth")})
    return sorted(added, key=lambda item: item["path"])


def content_verdict(venv, rel, entry, owners):
    """None when the content is still what was installed; else why it is not."""
    path = os.path.join(venv, rel)
    if os.path.islink(path):
        now = "link:" + os.readlink(path)
        return None if len(entry) > 4 and entry[4] == now else "symlink changed"
    digest = owners.get(rel, ("", ""))[1]
    if digest:
        return None if record_hash(path) == digest else "content differs from the wheel's RECORD"
    if len(entry) > 4:
        return None if sha256_file(path) == entry[4] else "content differs from the build"
    return "changed since the build"


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


def nvidia_facts():
    """GPUs and driver from /proc (cheap); compute capability from nvidia-smi when present."""
    facts = {"driver": None, "gpus": []}  # type: dict
    try:
        with open("/proc/driver/nvidia/version") as handle:
            match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", handle.read())
            facts["driver"] = match.group(1) if match else None
    except OSError:
        return facts
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
            for line in out.strip().splitlines():
                name, _, cap = line.partition(",")
                facts["gpus"].append({"name": name.strip(), "capability": cap.strip()})
        except (OSError, subprocess.SubprocessError):
            pass
    return facts


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
    state["hardware"] = nvidia_facts()
    if in_generation:
        gen_dir = os.path.realpath(sys.prefix)
        facts = generation_facts(gen_dir, state["hardware"])
        state.update(facts)
        if req.get("verify", True):
            state["files"] = verify_files(gen_dir, deep=req.get("deep", False))
        state["cache"] = cache_state(req.get("cache_dir"), facts["fingerprint"])
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


def cache_state(cache_dir, fingerprint):
    if not cache_dir or fingerprint is None:
        return None
    path = os.path.join(cache_dir, fingerprint["id"])
    state = {"dir": path, "fingerprint": fingerprint, "exists": os.path.isdir(path)}
    if state["exists"]:
        state.update(cache_warmth(path))
    return state


def scripts_state(spec):
    if not spec:
        return None
    found = {}
    for rel in spec["files"]:
        path = os.path.join(spec["dest"], rel)
        found[rel] = sha256_file(path) if os.path.isfile(path) else None
    return {"dest": spec["dest"], "hashes": found}


# -- apply --------------------------------------------------------------------------------
class RootLock:
    """flock on <root>/.envlock.lock: one apply, rollback or gc per root at a time."""

    def __init__(self, root, wait):
        self.path = os.path.join(root, ".envlock.lock")
        self.wait = wait
        self.fd = -1

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 200, 0).decode(errors="replace").strip()
            if not self.wait:
                message = f"another envlock operation holds {self.path} ({holder or 'unknown'})"
                raise AgentError("busy", message) from None
            progress(f"waiting for another envlock operation on this root ({holder})")
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"pid {os.getpid()} on {os.uname().nodename}".encode(), 0)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


class AgentError(Exception):
    def __init__(self, kind, message):
        Exception.__init__(self, message)
        self.kind = kind


def run_step(argv, env=None, what=""):
    proc = subprocess.run(argv, capture_output=True, env=env)
    if proc.returncode != 0:
        raise AgentError(
            "command",
            f"{what or argv[0]} failed (exit {proc.returncode}): {' '.join(argv)}\n"
            + proc.stderr.decode(errors="replace").strip(),
        )
    return proc


def uv_env(req):
    env = dict(os.environ)
    env.update(req.get("uv_env") or {})
    env.pop("VIRTUAL_ENV", None)
    if req.get("offline"):
        env["UV_OFFLINE"] = "1"
        env["UV_PYTHON_DOWNLOADS"] = "never"
    return env


def sync_argv(req, gen_dir, extra=()):
    # The lock names every wheel by URL; no index or find-links is consulted.
    argv = [
        req["uv"],
        "pip",
        "sync",
        os.path.join(gen_dir, LOCK_COPY),
        "--python",
        os.path.join(gen_dir, "bin", "python"),
        "--quiet",
    ]
    return argv + list(extra)


def do_build(req, action):
    root = req["root"]
    gen_dir = os.path.join(root, "generations", action["name"])
    existing = os.path.join(gen_dir, GENERATION)
    if os.path.exists(existing):
        progress("generation {} already built".format(action["name"]))
        return
    if os.path.lexists(gen_dir):
        shutil.rmtree(gen_dir)
    try:
        build_into(req, gen_dir, action)
    except BaseException:
        # Never leave a half-built generation behind when we still can (a full disk wants
        # its space back); after a kill -9 the next apply's cleanup does it.
        shutil.rmtree(gen_dir, ignore_errors=True)
        raise


def build_into(req, gen_dir, action):
    env = uv_env(req)
    version = req["python_version"]
    progress(f"creating venv for Python {version}")
    try:
        run_step([req["uv"], "venv", "--quiet", "--python", version, gen_dir], env, "uv venv")
    except AgentError as exc:
        uv_says = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
        if "interpreter" in " ".join(uv_says).lower():
            raise AgentError(
                "python",
                f"no usable Python {version} on the target (install Python {version} there, "
                "or let uv download it by not running offline); uv says:\n  "
                + "\n  ".join(uv_says[:4]),
            ) from None
        raise
    os.makedirs(os.path.join(gen_dir, META_DIR), exist_ok=True)
    write_atomic(os.path.join(gen_dir, LOCK_COPY), req["lock_text"].encode())
    progress(f"installing {req.get('package_count', 0)} packages from the lock")
    run_step(sync_argv(req, gen_dir), env, "uv pip sync")
    finish_generation(req, gen_dir, action)


def finish_generation(req, gen_dir, action):
    progress("writing the manifest")
    count = write_manifest(gen_dir)
    meta = {
        "number": action["number"],
        "lock_sha256": req["lock_sha256"],
        "files": count,
        "python_version": req["python_version"],
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_atomic(os.path.join(gen_dir, GENERATION), json.dumps(meta, sort_keys=True).encode())


def do_repair(req, action):
    """Re-sync a generation in place to its own lock: reinstall what changed, drop strays."""
    gen_dir = os.path.join(req["root"], "generations", action["name"])
    env = uv_env(req)
    for dist in action.get("clean_cache", []):
        progress(f"dropping {dist} from uv's cache (a hardlinked file was edited)")
        run_step([req["uv"], "cache", "clean", dist], env, "uv cache clean")
    for rel in action.get("remove", []):
        path = os.path.join(gen_dir, rel)
        if os.path.realpath(path).startswith(os.path.realpath(gen_dir) + os.sep):
            os.unlink(path)
    extra = []
    for dist in action.get("reinstall", []):
        extra += ["--reinstall-package", dist]
    progress("re-syncing generation {} to its lock".format(action["name"]))
    run_step(sync_argv(req, gen_dir, extra), env, "uv pip sync")
    meta = read_json(os.path.join(gen_dir, GENERATION)) or {}
    write_manifest(gen_dir)
    meta["repaired"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_atomic(os.path.join(gen_dir, GENERATION), json.dumps(meta, sort_keys=True).encode())


def do_switch(req, action):
    root = req["root"]
    gen_dir = os.path.join(root, "generations", action["name"])
    if not os.path.exists(os.path.join(gen_dir, GENERATION)):
        raise AgentError(
            "state",
            "generation {} is not complete; refusing to switch to it".format(action["name"]),
        )
    previous = current_generation(root)
    symlink_atomic(os.path.join(root, "current"), os.path.join("generations", action["name"]))
    append_history(
        root, {"action": action.get("why", "switch"), "from": previous, "to": action["name"]}
    )


def do_link_venv(req, action):
    venv = req["venv"]
    if os.path.lexists(venv) and not os.path.islink(venv):
        raise AgentError(
            "state",
            f"{venv} exists and is not a symlink; envlock will not replace a "
            "real directory or file",
        )
    parent = os.path.dirname(venv.rstrip("/"))
    os.makedirs(parent, exist_ok=True)
    symlink_atomic(venv, os.path.join(req["root"], "current"))


def do_scripts(req, action):
    dest = action["dest"]
    for rel, item in sorted(action["files"].items()):
        data = base64.b64decode(item["data"])
        if hashlib.sha256(data).hexdigest() != item["sha256"]:
            raise AgentError("integrity", f"script {rel} arrived corrupted")
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, data)
        os.chmod(path, item.get("mode", 0o644))
        if sha256_file(path) != item["sha256"]:
            raise AgentError("integrity", f"script {path} does not match its pinned hash")


def do_cache_dir(req, action):
    gen_dir = os.path.join(req["root"], "generations", action["generation"])
    fingerprint = generation_facts(gen_dir, nvidia_facts())["fingerprint"]
    if fingerprint is not None:
        path = os.path.join(req["cache_dir"], fingerprint["id"])
        os.makedirs(os.path.join(path, "inductor"), exist_ok=True)
        os.makedirs(os.path.join(path, "triton"), exist_ok=True)


def do_cleanup(req, action):
    for name in action["names"]:
        path = os.path.join(req["root"], "generations", name)
        if GEN_RE.match(name) and os.path.isdir(path) and name != current_generation(req["root"]):
            progress(f"removing generation {name}")
            shutil.rmtree(path)


def do_install_uv(req, action):
    """Verify the uploaded uv binary's hash, then move it into place atomically."""
    tmp, final = action["tmp"], action["path"]
    if sha256_file(tmp) != action["sha256"]:
        os.unlink(tmp)
        raise AgentError("integrity", "the uploaded uv binary does not match its sha256")
    os.chmod(tmp, 0o755)
    os.replace(tmp, final)
    st = os.stat(final)
    record = {
        "version": action["version"],
        "sha256": action["sha256"],
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
    }
    write_atomic(final + ".json", json.dumps(record, sort_keys=True).encode())


ACTIONS = {
    "cleanup": do_cleanup,
    "build": do_build,
    "repair": do_repair,
    "switch": do_switch,
    "link-venv": do_link_venv,
    "scripts": do_scripts,
    "cache-dir": do_cache_dir,
    "install-uv": do_install_uv,
}


def apply(req):
    root = req["root"]
    os.makedirs(os.path.join(root, "generations"), exist_ok=True)
    done = []
    with RootLock(root, req.get("wait", True)):
        for action in req["actions"]:
            progress(action["description"])
            ACTIONS[action["kind"]](req, action)
            done.append(action["kind"])
    return {"done": done, "current": current_generation(root)}


COMMANDS = {"probe": probe, "apply": apply}
STREAMING = []  # type: list  # non-empty once a command started writing binary output


def main(argv=None):
    """`agent COMMAND [REQUEST-JSON]`: the request comes as an argument when stdin carries
    data (an archive to restore), else on stdin. JSON answer (or error) on stdout."""
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv else "probe"
    try:
        req = json.loads(argv[1] if len(argv) > 1 else sys.stdin.read() or "{}")
        result = COMMANDS[command](req)
    except AgentError as exc:
        return fail({"kind": exc.kind, "message": str(exc)})
    except OSError as exc:
        return fail(
            {
                "kind": "os",
                "errno": errno.errorcode.get(exc.errno or 0, ""),
                "message": "{}: {}".format(exc.filename or "", exc.strerror or exc),
            }
        )
    if result is not None:  # streaming commands wrote their output themselves
        sys.stdout.write(json.dumps(result) + "\n")
    return 0


def fail(error):
    # Errors go to stdout as JSON, except after a stream began: then stderr.
    stream = sys.stderr if STREAMING else sys.stdout
    stream.write(json.dumps({"error": error}) + "\n")
    return 4


if __name__ == "__main__":
    sys.exit(main())
