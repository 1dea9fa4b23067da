"""The agent's compile-cache commands: status, save (a tar stream), restore (from stdin).

Shipped together with core.py into one namespace (see reconcile/agentcall.py); stdlib only,
Python 3.8+. A cache archive is a gzipped tar whose first member, `envlock-cache.json`,
records the build fingerprint it belongs to; files live under `cache/`.
"""

import io
import json
import os
import shutil
import sys
import tarfile
import time
import zlib

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import (
        COMMANDS,
        STREAMING,
        AgentError,
        current_generation,
        list_generations,
        make_durable,
        refuse_untrusted,
        write_atomic,
    )
    from envlock.agent.probe import cache_warmth, generation_facts, nvidia_facts

ARCHIVE_META = "envlock-cache.json"
ARCHIVE_FORMAT = 1


def generation_fingerprints(root, hardware):
    """Fingerprint id of every complete generation, and of the active one."""
    found = {}
    for gen in list_generations(root):
        if gen["complete"]:
            gen_dir = os.path.join(root, "generations", gen["name"])
            fingerprint = generation_facts(gen_dir, hardware)["fingerprint"]
            found[gen["name"]] = fingerprint
    return found


def cache_status(req):
    root, cache_dir = req["root"], req["cache_dir"]
    hardware = nvidia_facts()
    per_generation = generation_fingerprints(root, hardware)
    current = current_generation(root)
    active = (per_generation.get(current) or {}).get("id")
    users = {}  # type: dict
    for name, fingerprint in per_generation.items():
        if fingerprint:
            users.setdefault(fingerprint["id"], []).append(name)
    dirs = []
    names = sorted(os.listdir(cache_dir)) if os.path.isdir(cache_dir) else []
    for name in names:
        path = os.path.join(cache_dir, name)
        if os.path.isdir(path):
            entry = {
                "id": name,
                "dir": path,
                "generations": sorted(users.get(name, [])),
                "active": name == active,
            }
            entry.update(cache_warmth(path))
            dirs.append(entry)
    if active and active not in names:
        dirs.append(
            {
                "id": active,
                "dir": os.path.join(cache_dir, active),
                "files": 0,
                "bytes": 0,
                "last_used": None,
                "active": True,
                "generations": sorted(users.get(active, [])),
            }
        )
    active_parts = (per_generation.get(current) or {}).get("parts")
    return {
        "cache_dir": cache_dir,
        "active": active,
        "active_parts": active_parts,
        "current": current,
        "dirs": dirs,
    }


def active_fingerprint(req):
    root = req["root"]
    current = current_generation(root)
    if current is None:
        raise AgentError("state", "no active generation: run `envlock apply` first")
    gen_dir = os.path.join(root, "generations", current)
    fingerprint = generation_facts(gen_dir, nvidia_facts())["fingerprint"]
    if fingerprint is None:
        raise AgentError("state", "the active generation has no torch: nothing is compiled")
    return fingerprint


def cache_save(req):
    """Write a gzipped tar of the active build's cache dir to stdout (binary)."""
    fingerprint = active_fingerprint(req)
    source = os.path.join(req["cache_dir"], fingerprint["id"])
    warmth = cache_warmth(source) if os.path.isdir(source) else {"files": 0, "bytes": 0}
    meta = {
        "format": ARCHIVE_FORMAT,
        "fingerprint": fingerprint,
        "files": warmth["files"],
        "bytes": warmth["bytes"],
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    STREAMING.append(True)
    out = sys.stdout.buffer
    with tarfile.open(fileobj=out, mode="w|gz") as archive:
        data = json.dumps(meta, sort_keys=True).encode()
        info = tarfile.TarInfo(ARCHIVE_META)
        info.size, info.mtime = len(data), int(time.time())
        archive.addfile(info, io.BytesIO(data))
        if os.path.isdir(source):
            archive.add(source, arcname="cache", recursive=True)
    out.flush()
    return None


def differing_parts(theirs, ours):
    keys = sorted(set(theirs) | set(ours))
    return [
        f"{k}: archive has {theirs.get(k)}, this build has {ours.get(k)}"
        for k in keys
        if theirs.get(k) != ours.get(k)
    ]


def cache_restore(req):
    """Unpack an archive from stdin into the active build's cache dir, if it belongs there."""
    fingerprint = active_fingerprint(req)
    try:
        return restore_stream(req, fingerprint)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise
        raise AgentError(
            "archive", f"not a readable envlock cache archive (a gzip'd tar): {exc}"
        ) from None


def archive_meta(archive, first):
    """The archive's metadata member, checked: a JSON object whose fingerprint is one."""
    if first is None or first.name != ARCHIVE_META or not first.isfile() or first.size > 1 << 20:
        raise AgentError("archive", f"not an envlock cache archive (no {ARCHIVE_META} first)")
    handle = archive.extractfile(first)
    try:
        meta = json.loads(handle.read().decode()) if handle else None
    except (ValueError, UnicodeDecodeError):
        meta = None
    fingerprint = meta.get("fingerprint") if isinstance(meta, dict) else None
    parts = fingerprint.get("parts") if isinstance(fingerprint, dict) else None
    if not isinstance(parts, dict):
        raise AgentError("archive", f"the archive's {ARCHIVE_META} is not envlock's metadata")
    return parts


def restore_stream(req, fingerprint):
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|gz") as archive:
        theirs = archive_meta(archive, archive.next())
        problems = differing_parts(theirs, fingerprint["parts"])
        if problems and not req.get("force"):
            raise AgentError(
                "fingerprint",
                "the archive's compile cache belongs to another build; " + "; ".join(problems),
            )
        refuse_untrusted(req["cache_dir"], "the compile-cache dir")
        dest = os.path.join(req["cache_dir"], fingerprint["id"])
        os.makedirs(dest, exist_ok=True)
        real_dest = os.path.realpath(dest)
        restored = 0
        for member in archive:
            rel = safe_member(member)
            if rel is None:
                continue
            target = os.path.join(dest, rel)
            if member.isdir():
                os.makedirs(target, exist_ok=True)
                inside(real_dest, target)
            elif member.isfile():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                inside(real_dest, os.path.dirname(target))
                write_member(archive.extractfile(member), target)
                os.utime(target, (member.mtime, member.mtime), follow_symlinks=False)
                restored += 1
    make_durable(dest)
    return {"restored": restored, "dir": dest, "fingerprint": fingerprint["id"]}


def inside(real_dest, path):
    """Refuse a directory that resolves outside the cache dir: a symlink planted inside it
    must not carry the restore elsewhere."""
    real = os.path.realpath(path)
    if real != real_dest and not real.startswith(real_dest + os.sep):
        raise AgentError("archive", f"{path} leads outside the cache dir (a symlink?): refusing")


def write_member(source, target):
    """Stream a member to a new file beside `target` (write_atomic: exclusive, never through
    a link, a link or device at `target` refused), then rename."""

    def fill(out):
        if source is not None:
            shutil.copyfileobj(source, out, 1 << 20)

    write_atomic(target, fill)


def safe_member(member):
    """The member's path under cache/, or None for anything that could escape the dir."""
    name = member.name
    if not (name == "cache" or name.startswith("cache/")):
        return None
    rel = os.path.normpath(name[len("cache") :].lstrip("/")) if name != "cache" else ""
    if rel in ("", ".") or rel.startswith("..") or os.path.isabs(rel):
        return None
    if not (member.isfile() or member.isdir()):
        return None  # links and devices are never restored
    return rel


COMMANDS.update(
    {"cache-status": cache_status, "cache-save": cache_save, "cache-restore": cache_restore}
)
