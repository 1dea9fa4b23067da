"""The agent's apply: carry out a plan's actions on the target, under the root's lock."""

import base64
import fcntl
import hashlib
import json
import os
import re
import sys
import time

# subprocess and shutil are imported by the steps that build or remove (a rollback's switch
# is a symlink and a history line: it does not pay for them).

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.adopt import do_adopt
    from envlock.agent.core import (
        COMMANDS,
        GEN_RE,
        GENERATION,
        HOLD,
        LIVE,
        LOCK_COPY,
        META_DIR,
        TRASH,
        AgentError,
        append_history,
        current_generation,
        file_stats,
        fsync_dir,
        list_generations,
        list_removals,
        make_durable,
        owned_python,
        progress,
        read_json,
        refuse_untrusted,
        root_fingerprint,
        sha256_file,
        symlink_atomic,
        uv_cache_damage,
        uv_environment,
        write_atomic,
    )
    from envlock.agent.files import (
        canonical,
        pth_owners,
        write_manifest,
    )
    from envlock.agent.probe import (
        generation_facts,
        nvidia_facts,
    )
    from envlock.agent.rooted import point_activate_at_stable, root_uv
    from envlock.agent.survey import pyvenv_cfg


# -- apply --------------------------------------------------------------------------------
class RootLock:
    """flock on <root>/.envlock.lock: one apply, rollback or gc per root at a time."""

    def __init__(self, root, wait):
        self.path = os.path.join(root, ".envlock.lock")
        self.wait = wait
        self.fd = -1

    def __enter__(self):
        # Never through a link: a lock file planted as one would be truncated below.
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
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


def run_step(argv, env=None, what="", watch=None):
    import subprocess

    if watch is None:
        proc = subprocess.run(argv, capture_output=True, env=env)
    else:
        proc = run_watching(argv, env, watch)
    if proc.returncode != 0:
        raise AgentError(
            "command",
            f"{what or argv[0]} failed (exit {proc.returncode}): {' '.join(argv)}\n"
            + proc.stderr.decode(errors="replace").strip(),
        )
    return proc


def run_watching(argv, env, watch, every=0.5):
    """subprocess.run's captured run, calling `watch` as it starts (a terminal sees the
    step at once, however fast it turns out) and every `every` seconds meanwhile."""
    import subprocess

    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        watch()
        while True:
            try:
                out, err = child.communicate(timeout=every)
                return subprocess.CompletedProcess(argv, child.returncode, out, err)
            except subprocess.TimeoutExpired:
                watch()
    except BaseException:
        child.kill()
        child.wait()
        raise


def install_count(gen_dir, total):
    """The install's progress as envlock counts it: the packages in place so far."""

    def watch():
        lib = os.path.join(gen_dir, "lib")
        count = 0
        for name in os.listdir(lib) if os.path.isdir(lib) else ():
            site = os.path.join(lib, name, "site-packages")
            if os.path.isdir(site):
                count += sum(1 for n in os.listdir(site) if n.endswith(".dist-info"))
        progress(f"{LIVE}installing: {min(count, total)} of {total} packages in place")

    return watch


def uv_env(req):
    env = uv_environment()
    env.update(req.get("uv_env") or {})
    if req.get("offline"):
        env["UV_OFFLINE"] = "1"
    if req.get("offline") or not req.get("python_downloads"):
        env["UV_PYTHON_DOWNLOADS"] = "never"
    return env


def sync_argv(req, gen_dir, extra=()):
    # The lock names every wheel by URL; no index or find-links is consulted. Nothing is
    # built from source but what the request allows (building runs the package's code).
    argv = [
        req["uv"],
        "pip",
        "sync",
        os.path.join(gen_dir, LOCK_COPY),
        "--python",
        os.path.join(gen_dir, "bin", "python"),
        "--quiet",
    ]
    if not req.get("build"):
        argv.append("--no-build")
    else:
        for name in req.get("binary_only") or ():
            argv += ["--only-binary", name]
    return argv + list(extra)


# -- removing a generation: a transaction -------------------------------------------------
# A generation being removed is first renamed to a trash name in one durable step (the
# rename, then an fsync of generations/): from then on no listing, rollback or run sees it,
# whatever a crash or a kill -9 interrupts next. Only then are its files deleted; the next
# operation on the root (under its lock) finishes a removal a crash cut short; the probe
# lists what is left (`removing`), and a converge plans its cleanup.


def remove_generation(root, name):
    base = os.path.join(root, "generations")
    trash = os.path.join(base, f"{TRASH}{name}.{os.urandom(4).hex()}")
    os.rename(os.path.join(base, name), trash)
    fsync_dir(base)
    delete_tree(trash)


def delete_tree(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def finish_removals(root):
    """Delete what a removal a crash interrupted left in the trash (under the root's lock)."""
    for name in list_removals(root):
        progress("finishing the removal of generation {}".format(name[len(TRASH) :].split(".")[0]))
        delete_tree(os.path.join(root, "generations", name))


def do_build(req, action):
    import shutil

    root = req["root"]
    gen_dir = os.path.join(root, "generations", action["name"])
    existing = os.path.join(gen_dir, GENERATION)
    if os.path.exists(existing):
        progress("generation {} already built".format(action["name"]))
        return
    if os.path.lexists(gen_dir):
        remove_generation(root, action["name"])
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
        run_step(venv_argv(req, gen_dir, env), env, "uv venv")
    except AgentError as exc:
        uv_says = [line.strip() for line in str(exc).splitlines()[1:] if line.strip()]
        if "interpreter" in " ".join(uv_says).lower():
            raise no_python(req, "uv says:", uv_says[:4]) from None
        raise
    refuse_untrusted(os.path.realpath(os.path.join(gen_dir, "bin", "python")), "the interpreter")
    refuse_other_patch(req, gen_dir)
    os.makedirs(os.path.join(gen_dir, META_DIR), exist_ok=True)
    write_atomic(os.path.join(gen_dir, LOCK_COPY), req["lock_text"].encode())
    progress(f"installing {req.get('package_count', 0)} packages from the lock")
    sync_repairing_cache(req, gen_dir, env)
    refuse_pth(req, gen_dir)
    finish_generation(req, gen_dir, action)


def venv_argv(req, gen_dir, env):
    """`uv venv` on the interpreter envlock chose (core's `owned_python`), and uv runs no
    other; with none on PATH, a managed CPython from the install directory `own_environment`
    decided (yours: `uv python install`), fetched only when the profile allows downloads."""
    version = req["python_version"]
    chosen, passed = owned_python(version, env.get("PATH") or os.defpath)
    for line in passed:
        progress(f"passed over {line}")
    uv = [req["uv"], "venv", "--quiet", "--python"]
    if chosen is not None:
        only = ["--python-preference", "only-system", "--no-python-downloads"]
        return [*uv, chosen, *only, gen_dir]
    managed = [version, "--python-preference", "only-managed"]
    if not (req.get("python_downloads") and not req.get("offline")):
        managed.append("--no-python-downloads")
    return [*uv, *managed, gen_dir]


def refuse_other_patch(req, gen_dir):
    """A profile's "3.11.9": the owned python3.11 envlock chose must be that one (uv writes
    what it is into pyvenv.cfg's `version_info`)."""
    version = req["python_version"]
    if version.count(".") < 2:
        return
    cfg = pyvenv_cfg(os.path.join(gen_dir, "pyvenv.cfg"), gen_dir) or {}
    found = cfg.get("version_info") or cfg.get("version")
    if found is None or not (found + ".").startswith(version + "."):
        raise no_python(req, "the owned one on PATH is:", [str(found)])


def no_python(req, intro, said):
    version = req["python_version"]
    fixes = (
        f"install Python {version} on the target (e.g. `uv python install {version}`"
        f" or the OS package python{version}) where root or you own it"
    )
    if not (req.get("python_downloads") and not req.get("offline")):
        fixes += ", or set [python] download = true to let uv fetch a managed CPython"
    told = f"; {intro}" + "".join(f"\n  {line}" for line in said) if said else ""
    return AgentError("python", f"no Python {version} on the target: {fixes}{told}")


def sync_repairing_cache(req, gen_dir, env, extra=()):
    """`uv pip sync`; when uv fails on its own damaged cache (a crash), clean the entries of
    every package the lock names (uv blames one at a time) and retry once."""
    watch = install_count(gen_dir, req.get("package_count", 0))
    try:
        run_step(sync_argv(req, gen_dir, extra), env, "uv pip sync", watch)
        return
    except AgentError as exc:
        blamed = uv_cache_damage(str(exc))
        if blamed is None:
            raise
    names = sorted(set(blamed) | set(LOCKED_NAME.findall(req.get("lock_text", ""))))
    progress(
        "uv's cache holds damaged entries ({}; after a crash?): cleaning {} package(s) and "
        "retrying".format(", ".join(blamed) or "unnamed", len(names))
    )
    run_step([req["uv"], "cache", "clean", *names], env, "uv cache clean")
    try:
        run_step(sync_argv(req, gen_dir, extra), env, "uv pip sync", watch)
    except AgentError as again:
        if uv_cache_damage(str(again)) is None:
            raise
        raise AgentError(
            "uv-cache",
            "uv's cache is still damaged after cleaning {}: clean it whole on the target "
            "(`uv cache clean`) and apply again\n{}".format(", ".join(names), again),
        ) from None


LOCKED_NAME = re.compile(r'^name = "([^"]+)"', re.M)


def refuse_pth(req, gen_dir):
    """A .pth runs in every interpreter of the environment: from a stranger's lock, only
    the packages the user named may install one. Checked after the install (only then are
    the wheels' files known) and before the generation is finished: refused, it is removed
    and never run."""
    allowed = req.get("pth_allowed")
    if allowed is None:
        return
    found = {
        dist: files for dist, files in pth_owners(gen_dir).items() if canonical(dist) not in allowed
    }
    if found:
        listed = ", ".join(
            "{} ({})".format(dist, ", ".join(files)) for dist, files in sorted(found.items())
        )
        flags = " ".join("--allow-pth " + canonical(dist) for dist in sorted(found))
        raise AgentError(
            "refused",
            "the snapshot's lock installs startup code (.pth, sitecustomize.py), which every "
            f"Python of the environment runs: {listed}; the generation was removed, nothing "
            f"ran. If you trust them, apply again with {flags}",
        )


def finish_generation(req, gen_dir, action):
    # Before the manifest: the shim, activate and the API are part of the generation.
    write_pip_shims(req, gen_dir, action["number"])
    write_api(req, gen_dir)
    point_activate_at_stable(req, gen_dir)
    progress("writing the manifest")
    count, size, own = write_manifest(gen_dir)
    # generation.json is what makes a generation count: everything before it is on disk.
    make_durable(gen_dir)
    meta = {
        "number": action["number"],
        "lock_sha256": req["lock_sha256"],
        "files": count,
        "bytes": size,
        "own_bytes": own,
        "python_version": req["python_version"],
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_atomic(os.path.join(gen_dir, GENERATION), json.dumps(meta, sort_keys=True).encode())


# The environment's own `pip` (uv-built venvs have none): installs are refused with the way
# to add packages safely; queries go to uv. POSIX sh: the target may have no bash.
PIP_SHIM = """#!/bin/sh
# Written by envlock: this generation is managed, so `pip install` would be drift.
uv=@UV@
python=@PYTHON@
message=@MESSAGE@
case "${1-}" in
  install|uninstall|download)
    if [ "${ENVLOCK_ALLOW_PIP-}" != 1 ]; then
      printf '%s\\n' "$message" >&2
      exit 1
    fi
    command=$1
    shift
    if [ "$command" = download ]; then
      echo "pip download: uv has no download; run it with another Python's pip" >&2
      exit 1
    fi
    if [ "$command" = uninstall ]; then
      # uv never asks, so pip's -y/--yes means nothing to it (and it refuses the option).
      for arg do
        shift
        case $arg in -y|--yes) continue ;; esac
        set -- "$@" "$arg"
      done
    fi
    exec "$uv" pip "$command" --python "$python" "$@" ;;
  list|show|freeze|check)
    command=$1
    shift
    exec "$uv" pip "$command" --python "$python" "$@" ;;
  -V|--version)
    echo "pip (envlock's shim over $("$uv" --version), for $python)"
    exit 0 ;;
  *)
    echo "this pip is envlock's: it runs install, uninstall, list, show, freeze and check" >&2
    echo "for anything else, run: $uv pip ... --python $python" >&2
    exit 2 ;;
esac
"""


def sh_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def write_pip_shims(req, gen_dir, number):
    """bin/pip and bin/pip3, unless the lock installs a real pip (its files are its own)."""
    profile = req.get("profile") or "PROFILE"
    message = (
        f"this environment is managed by envlock (profile {profile}, generation {number}). "
        f"To add packages: `envlock add {profile} REQ…` — it shows what would change and "
        "keeps the current generation for rollback. To install anyway (check will report "
        "drift): `ENVLOCK_ALLOW_PIP=1 pip install …`"
    )
    values = {
        "@UV@": root_uv(req),  # in the root: the generation outlives envlock's checkout
        "@PYTHON@": os.path.join(gen_dir, "bin", "python"),
        "@MESSAGE@": message,
    }
    script = PIP_SHIM
    for key, value in values.items():
        script = script.replace(key, sh_quote(value))
    for name in ("pip", "pip3"):
        path = os.path.join(gen_dir, "bin", name)
        if not os.path.lexists(path):
            write_atomic(path, script.encode(), 0o755)


def write_api(req, gen_dir):
    """The in-process API as `envlock run` ships it (`import envlock`, envlock_megacache), in
    the generation's own .envlock/api, and one .pth that appends it to sys.path: a script
    the generation's python starts directly imports it too; a real envlock or module of the
    same name the lock installs comes first. None is sent when the lock installs envlock."""
    files = req.get("api_files")
    if not files:
        return
    base = os.path.join(gen_dir, META_DIR, "api")
    for rel, text in sorted(files.items()):
        if rel.startswith("/") or ".." in rel.split("/"):
            raise AgentError("integrity", f"api file {rel!r}: not a path in the generation")
        os.makedirs(os.path.dirname(os.path.join(base, rel)), exist_ok=True)
        write_atomic(os.path.join(base, rel), text.encode())
    lib = os.path.join(gen_dir, "lib")
    for name in sorted(os.listdir(lib)):
        site = os.path.join(lib, name, "site-packages")
        if name.startswith("python") and os.path.isdir(site):
            startup = os.path.relpath(os.path.join(base, "startup"), site)
            # startup/pipshim: `python -m pip` runs the generation's pip shim.
            lines = f"{startup}\n{startup}/envlock_api\n{startup}/pipshim\n"
            write_atomic(os.path.join(site, "_envlock_api.pth"), lines.encode())


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
    sync_repairing_cache(req, gen_dir, env, extra)
    meta = read_json(os.path.join(gen_dir, GENERATION)) or {}
    # A pip installed over the shim and then synced away took bin/pip with it: put it back.
    write_pip_shims(req, gen_dir, meta.get("number", action["name"].split("-")[0]))
    write_manifest(gen_dir)
    make_durable(gen_dir)
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
    why = action.get("why", "switch")
    held = why in HELD_SWITCHES
    if held:
        # Written before the switch: a reader never sees the held generation unheld.
        write_hold(root, action["name"], previous, why)
    symlink_atomic(os.path.join(root, "current"), os.path.join("generations", action["name"]))
    if not held:
        end_hold(root)
    append_history(root, {"action": why, "from": previous, "to": action["name"]})


# Switches that hold the root on their generation until the next converge: a rollback, and
# an apply of a snapshot's lock (both judged by the generation's own lock meanwhile).
HELD_SWITCHES = ("rollback", "snapshot")


def write_hold(root, name, previous, why):
    hold = {"generation": name, "from": previous, "time": utc_now(), "why": why}
    write_atomic(os.path.join(root, HOLD), json.dumps(hold, sort_keys=True).encode())


def do_hold(req, action):
    """Hold the active generation (a snapshot's lock) or end a hold (the profile's lock is
    active again): what a converge that stays on the active generation owes the hold."""
    root = req["root"]
    if action["held"]:
        write_hold(root, action["name"], None, "snapshot")
    else:
        end_hold(root)


def end_hold(root):
    """Remove the hold, durably (a power cut must not bring it back)."""
    if os.path.lexists(os.path.join(root, HOLD)):
        os.unlink(os.path.join(root, HOLD))
        fsync_dir(root)


def utc_now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def do_link_venv(req, action):
    venv = req["venv"]
    if os.path.lexists(venv) and not os.path.islink(venv):
        raise AgentError(
            "state",
            f"{venv} exists and is not a symlink; envlock will not replace a "
            "real directory or file (`envlock apply --adopt` keeps a venv there as "
            "generation 0)",
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
        write_atomic(path, data, item.get("mode", 0o644))
        if sha256_file(path) != item["sha256"]:
            raise AgentError("integrity", f"script {path} does not match its pinned hash")


def do_cache_dir(req, action):
    gen_dir = os.path.join(req["root"], "generations", action["generation"])
    fingerprint = generation_facts(gen_dir, nvidia_facts())["fingerprint"]
    if fingerprint is not None:
        refuse_untrusted(req["cache_dir"], "the compile-cache dir")
        path = os.path.join(req["cache_dir"], fingerprint["id"])
        os.makedirs(os.path.join(path, "inductor"), exist_ok=True)
        os.makedirs(os.path.join(path, "triton"), exist_ok=True)


def do_cleanup(req, action):
    freed = 0
    for name in action["names"]:
        path = os.path.join(req["root"], "generations", name)
        if name.startswith(TRASH):  # a removal a crash interrupted
            delete_tree(path)
            continue
        if GEN_RE.match(name) and os.path.isdir(path) and name != current_generation(req["root"]):
            progress(f"removing generation {name}")
            freed += unshared_bytes(path)
            remove_generation(req["root"], name)
    FREED.append(freed)


def unshared_bytes(path):
    """What removing a tree gives back, as du would count it: files no other link holds
    (uv hardlinks most of a venv from its cache, which keeps those)."""
    return sum(st.st_size for st in file_stats(path) if st.st_nlink == 1)


FREED = []  # type: list  # bytes given back by the cleanups of this apply


def do_install_uv(req, action):
    """Verify the uploaded uv binary's hash, then move it into place atomically."""
    tmp, final = action["tmp"], action["path"]
    # Hashed and made executable through one descriptor: the file checked is the one moved.
    fd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with os.fdopen(os.dup(fd), "rb") as handle:
            digest = hashlib.sha256()
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != action["sha256"]:
            os.unlink(tmp)
            raise AgentError("integrity", "the uploaded uv binary does not match its sha256")
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)
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
    "adopt": do_adopt,  # agent/adopt.py
    "cleanup": do_cleanup,
    "build": do_build,
    "repair": do_repair,
    "switch": do_switch,
    "hold": do_hold,
    "link-venv": do_link_venv,
    "scripts": do_scripts,
    "cache-dir": do_cache_dir,
    "install-uv": do_install_uv,
}


def number_builds(root, actions):
    """Name each new generation while holding the root's lock: an apply planned against an
    older view may have been overtaken by another that took its number meanwhile."""
    taken = {g["number"]: g["name"] for g in list_generations(root)}
    renamed = {}
    for action in actions:
        if action["kind"] != "build":
            continue
        number, name = action["number"], action["name"]
        if number in taken and taken[number] != name:
            number = max(taken) + 1
            new = "{}-{}".format(number, name.split("-", 1)[1])
            progress(f"generation {name} was taken by another apply: building {new}")
            renamed[name] = new
            action.update(number=number, name=new)
        taken[number] = action["name"]
    for action in actions:
        for key in ("name", "generation"):
            if action["kind"] != "build" and action.get(key) in renamed:
                action[key] = renamed[action[key]]


def apply(req):
    root = req["root"]
    refuse_untrusted(root, "the root")  # before creating anything in it
    os.makedirs(os.path.join(root, "generations"), exist_ok=True)
    refuse_untrusted(root, "the root")  # a root is whoever's created it first
    done = []
    seconds = []
    with RootLock(root, req.get("wait", True)):
        # Decided under the lock: a plan made from a root that another operation changed
        # meanwhile (the one this apply waited for) is planned again, not carried out.
        assumed = req.get("assumed")
        if assumed is not None and root_fingerprint(root) != assumed["fingerprint"]:
            progress("the root changed since this plan was made: planning again")
            return {"replan": True, "done": [], "current": current_generation(root)}
        if req.get("handshake") and not handshake():
            return {"aborted": True, "done": [], "current": current_generation(root)}
        finish_removals(root)
        number_builds(root, req["actions"])
        for action in req["actions"]:
            progress(action["description"])
            started = time.perf_counter()
            ACTIONS[action["kind"]](req, action)
            done.append(action["kind"])
            seconds.append(round(time.perf_counter() - started, 6))
    return {
        "done": done,
        "seconds": seconds,  # each action's, as the target measured it
        "current": current_generation(root),
        "freed": sum(FREED),
    }


LOCKED = "envlock-locked: "


def handshake():
    """Say that the lock is held and the plan still holds, then wait for the controller's
    word: it acts before the first change (a Proxmox snapshot of the container) while no
    other apply can start. True: go on; anything else (or the controller gone): stop."""
    sys.stderr.write(LOCKED + "ready\n")
    sys.stderr.flush()
    return sys.stdin.readline().strip() == "go"


COMMANDS["apply"] = apply
