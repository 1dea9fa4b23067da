"""The agent's adoption (`apply --adopt`): a real venv at the profile's venv path becomes a
generation of the root as it is — nothing inside it changed, nothing ever deleted.

The order is what makes a crash harmless. Everything envlock needs (the manifest of the
files as they are, then generation.json) is written into the venv's own `.envlock/` while
it still stands at its path: a crash there leaves the old venv in place and working (the
next `apply --adopt` writes them again). One rename then moves the directory, unchanged,
under <root>/generations/: it arrives complete, so a crash after it leaves a complete
generation (the next apply links the venv path). Only then do `current` and the venv path
become links. The rename keeps every inode, so the manifest still describes the files.

Scripts in the venv name its old absolute path in their shebangs (`#!VENV/bin/python`);
the venv path becomes the link to `current`, so they keep working while the adopted
generation is active (and run the active generation's Python otherwise, as `activate` does).
"""

import hashlib
import json
import os
import stat
import time

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import (
        GENERATION,
        MANIFEST,
        AgentError,
        UnsafeFile,
        append_history,
        fsync_dir,
        kind_of,
        list_generations,
        make_durable,
        open_untrusted,
        progress,
        sparse_at,
        symlink_atomic,
        untrusted,
        write_atomic,
    )
    from envlock.agent.files import write_manifest


def do_adopt(req, action):
    """Keep the real venv at req["venv"] as generation action["number"], then link to it."""
    root, venv = req["root"], req["venv"].rstrip("/")
    generations = os.path.join(root, "generations")
    refuse_unadoptable(venv, root, generations, action["number"])
    progress(f"writing the manifest of {venv} as it is")
    count, size, own = write_manifest(venv)
    make_durable(venv)
    # own: the manifest write_manifest just wrote, under the root's lock
    with open(os.path.join(venv, MANIFEST), "rb") as handle:
        # No lock built it: the name carries what it holds instead (a lock's hash never
        # equals it, so apply builds the profile's lock beside it).
        name = "{}-{}".format(action["number"], hashlib.sha256(handle.read()).hexdigest()[:12])
    meta = {
        "number": action["number"],
        "adopted_from": venv,
        "lock_sha256": None,
        "files": count,
        "bytes": size,
        "own_bytes": own,
        "python_version": venv_python(venv),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_atomic(os.path.join(venv, GENERATION), json.dumps(meta, sort_keys=True).encode())
    gen_dir = os.path.join(generations, name)
    progress(f"moving {venv} to {gen_dir} (one rename: nothing copied, nothing changed)")
    os.rename(venv, gen_dir)
    fsync_dir(os.path.dirname(venv) or "/")
    fsync_dir(generations)
    symlink_atomic(os.path.join(root, "current"), os.path.join("generations", name))
    symlink_atomic(venv, os.path.join(root, "current"))
    append_history(root, {"action": "adopt", "from": None, "to": name, "adopted_from": venv})


def refuse_unadoptable(venv, root, generations, number):
    """Checked under the root's lock, before anything is written: the plan's view may be old."""
    if os.path.islink(venv):
        raise AgentError(
            "refused",
            f"{venv} is already a link (to {os.readlink(venv)}): it is managed by envlock, "
            "nothing to adopt; apply without --adopt",
        )
    if not os.path.isdir(venv):
        raise AgentError("refused", f"{venv} is not a directory: nothing to adopt")
    if not os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        raise AgentError(
            "refused", f"{venv} is not a venv (no pyvenv.cfg): envlock adopts only a venv"
        )
    real_venv, real_root = os.path.realpath(venv), os.path.realpath(root)
    if real_root == real_venv or real_root.startswith(real_venv + os.sep):
        raise AgentError(
            "refused", f"the root {root} lies inside {venv}: set [target] root to another path"
        )
    reason = untrusted(venv)
    if reason is not None:
        raise AgentError(
            "untrusted",
            f"refusing to adopt {venv}: {reason}. envlock runs the interpreter of what it "
            "manages: adopt only a venv that is yours",
        )
    refuse_foreign_interpreter(venv)
    refuse_special_files(venv)
    if os.stat(venv).st_dev != os.stat(generations).st_dev:
        raise AgentError(
            "refused",
            f"{venv} and the root {root} are on different file systems: adoption moves the "
            "venv with one rename (a copy would change it); set [target] root to a "
            "directory on the venv's file system",
        )
    if any(g["number"] == number for g in list_generations(root)):
        raise AgentError(
            "refused", f"the root {root} already has a generation {number}: nothing adopted"
        )


def refuse_foreign_interpreter(venv):
    """The interpreter envlock will run as the venv's (each bin/python* as the kernel resolves
    it, and pyvenv.cfg's `home`) must be, with every parent, this user's or root's and
    writable by no one else: a venv of yours whose python is another user's runs their code."""
    bin_dir = os.path.join(venv, "bin")
    names = [n for n in os.listdir(bin_dir) if n.startswith("python")]
    places = [os.path.realpath(os.path.join(bin_dir, name)) for name in sorted(names)]
    home = pyvenv_home(venv)
    if home:
        places.append(os.path.realpath(home))
    for place in places:
        reason = untrusted(place)
        if reason is not None:
            raise AgentError(
                "untrusted",
                f"refusing to adopt {venv}: its interpreter {place} is not yours ({reason}). "
                "envlock runs the interpreter of what it manages: rebuild the venv from a "
                "Python you or root own",
            )


def refuse_special_files(venv):
    """A venv holds regular files, directories and links: a FIFO would hang the manifest's
    hashing, a device or a sparse giant would never end it. Named, nothing adopted."""
    for top, dirs, files in os.walk(venv):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
                continue
            what = sparse_at(path, st) if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
            if what is not None:
                raise AgentError(
                    "refused",
                    f"refusing to adopt {venv}: {path} is {what}, not what a venv holds; "
                    "remove it, then adopt again",
                )


def pyvenv_home(venv):
    """pyvenv.cfg's `home` (where the venv's base interpreter lives), or None."""
    for line in read_pyvenv(venv):
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "home":
            return value.strip()
    return None


def read_pyvenv(venv):
    """pyvenv.cfg's lines, through the gate (a FIFO there must not hang adoption)."""
    try:
        with open_untrusted(os.path.join(venv, "pyvenv.cfg"), 64 * 1024) as handle:
            return handle.read().decode(errors="replace").splitlines()
    except (OSError, UnsafeFile):
        return []


def venv_python(venv):
    """The Python version pyvenv.cfg records (the venv is not run to ask)."""
    for line in read_pyvenv(venv):
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in ("version_info", "version"):
            return value.strip()[:40]
    return None
