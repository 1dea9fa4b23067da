"""A dataset's fingerprint: what a run read, cheap enough to take at every snapshot.

Stdlib only, Python 3.8: the agent runs it on the target (`envlock data`, `snapshot`), and
the controller imports it for local paths. Three levels, each seeing more edits:
- the listing (relative path, size, mtime_ns of every file): files added, removed, grown,
  shrunk or touched — not an edit that keeps both size and mtime;
- the sample: the first and last 64 KiB of a fixed subset of files (chosen by a hash of
  their path, so the same files are read each time): an edit inside those bytes;
- `deep`: every byte of every file (sha256, read once, in parallel): any edit. A sparse
  file (agent/core.py's `sparse`: a terabyte of holes made in no time) is not read whole:
  it is named among the unreadable, "(a sparse file …, not hashed)".
A fast fingerprint stats each file once (as `find` does) and reads only the sample.
A snapshot gives it a deadline: past it, what was counted is recorded as `incomplete`,
without digests (a digest of part of a listing would compare as a change)."""

import glob
import hashlib
import heapq
import os
import stat
import time
import zlib

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import COMMANDS, UnsafeFile, open_untrusted, pacer, sparse

SAMPLE_FILES = 256  # files whose head and tail the fast fingerprint reads
SAMPLE_BYTES = 64 * 1024  # from each end
MAX_NAMED = 20  # unreadable files named (all are counted)


class OutOfTime(Exception):
    """The deadline passed; `found` is what was listed until then."""

    def __init__(self, found):
        Exception.__init__(self, "out of time")
        self.found = found


def dataset_fingerprint(path, deep=False, say=None, deadline=None):
    """The fingerprint of a file, a directory (walked, links to directories not followed)
    or a glob; `{"missing": True}` when nothing is there. `deadline` (time.monotonic()):
    past it the walk stops and the answer says `incomplete`."""
    started = time.perf_counter()
    try:
        files, unreadable = dataset_listing(path, say, deadline)
        if files is not None:
            sample = sample_digest(files, unreadable, deadline)
    except OutOfTime as stop:
        return incomplete(path, stop.found, started)
    if files is None:
        return {"path": path, "missing": True}
    listing_digest = hashlib.sha256(
        "".join(f"{rel}\0{size}\0{mtime}\n" for rel, size, mtime, _ in files).encode(
            "utf-8", "surrogateescape"
        )
    )
    result = {
        "path": path,
        "missing": False,
        "files": len(files),
        "bytes": sum([f[1] for f in files]),
        "newest_mtime": max([f[2] for f in files], default=0) / 1e9,
        "listing_sha256": listing_digest.hexdigest(),
        "sample_sha256": sample,
        "unreadable": len(unreadable),
        "unreadable_named": sorted(unreadable)[:MAX_NAMED],
    }
    if deep:
        result["content_sha256"] = content_digest(files, unreadable, say)
        result["unreadable"] = len(unreadable)
        result["unreadable_named"] = sorted(unreadable)[:MAX_NAMED]
    result["seconds"] = round(time.perf_counter() - started, 3)
    return result


def incomplete(path, found, started):
    """What a walk cut short by its deadline counted: no digests, said to be incomplete."""
    return {
        "path": path,
        "missing": False,
        "incomplete": True,
        "files": len(found),
        "bytes": sum([f[1] for f in found]),
        "seconds": round(time.perf_counter() - started, 3),
    }


def dataset_listing(path, say=None, deadline=None):
    """(files, unreadable): each file as (relative path, size, mtime_ns, absolute path),
    sorted; None when the path names nothing."""
    unreadable = set()  # type: set
    found = []  # type: list
    if glob.has_magic(path):
        base = os.path.dirname(path.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]) or "."
        matches = sorted(glob.glob(path, recursive=True))
        if not matches:
            return None, unreadable
        for match in matches:
            walk_into(match, base, found, unreadable, say, deadline)
    else:
        try:
            os.stat(path)
        except FileNotFoundError:
            return None, unreadable
        except OSError:
            unreadable.add(os.path.basename(path))
            return [], unreadable
        base = path if os.path.isdir(path) else os.path.dirname(path) or "."
        walk_into(path, base, found, unreadable, say, deadline)
    found.sort()
    return found, unreadable


def walk_into(path, base, found, unreadable, say, deadline=None):
    """Append every regular file under `path` to `found`. Relative paths are cut from the
    absolute ones by a prefix (os.path.relpath per file would cost more than the stat)."""
    prefix = os.path.join(base, "")
    cut = len(prefix) if path == base or path.startswith(prefix) else 0
    try:
        st = os.stat(path)  # a link to a file counts as that file
    except OSError:
        unreadable.add(path[cut:])
        return
    if stat.S_ISREG(st.st_mode):
        found.append((path[cut:], st.st_size, st.st_mtime_ns, path))
    elif stat.S_ISDIR(st.st_mode):  # FIFOs, sockets, devices are not data a run reads as files
        walk_tree(path, cut, found, unreadable, say, deadline)


def walk_tree(path, cut, found, unreadable, say, deadline):
    """Every regular file under the directory `path`, depth first, links to directories
    not followed; the deadline and progress are looked at once a directory."""
    stack = [path]
    while stack:
        directory = stack.pop()
        if not list_directory(directory, cut, stack, found, unreadable):
            continue
        if deadline is not None and time.monotonic() > deadline:  # once a directory: cheap
            raise OutOfTime(found)
        if say is not None:
            say(lambda: f"listing {path}: {len(found):,} files")


def list_directory(directory, cut, stack, found, unreadable):
    """Append `directory`'s regular files to `found` and its subdirectories to `stack`;
    False when it cannot be listed (it is then unreadable)."""
    regular = stat.S_ISREG
    append = found.append
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        continue
                    st = entry.stat()  # follows a link to a file; a loop fails here
                except OSError:
                    unreadable.add(entry.path[cut:])
                    continue
                if regular(st.st_mode):
                    full = entry.path
                    append((full[cut:], st.st_size, st.st_mtime_ns, full))
    except OSError:
        unreadable.add(directory[cut:] + "/")
        return False
    return True


def sampled(files):
    """The fixed subset whose bytes the fast fingerprint reads: the SAMPLE_FILES files with
    the smallest CRC-32 of their relative path (stable as other files come and go)."""
    if len(files) <= SAMPLE_FILES:
        return list(files)
    crc = zlib.crc32
    return sorted(
        heapq.nsmallest(
            SAMPLE_FILES, files, key=lambda f: crc(f[0].encode("utf-8", "surrogateescape"))
        )
    )


def sample_digest(files, unreadable, deadline=None):
    digest = hashlib.sha256()
    for rel, size, _, full in sampled(files):
        if deadline is not None and time.monotonic() > deadline:  # a slow file system
            raise OutOfTime(files)
        try:
            # Through the gate: a file swapped for a FIFO after the listing must not block.
            with open_untrusted(full) as handle:
                head = handle.read(SAMPLE_BYTES)
                tail = b""
                if size > 2 * SAMPLE_BYTES:
                    handle.seek(size - SAMPLE_BYTES)
                    tail = handle.read(SAMPLE_BYTES)
                elif size > SAMPLE_BYTES:
                    tail = handle.read()
        except (OSError, UnsafeFile):
            unreadable.add(rel)
            continue
        digest.update(f"{rel}\0".encode("utf-8", "surrogateescape") + head + b"\0" + tail)
    return digest.hexdigest()


def content_digest(files, unreadable, say=None):
    """sha256 over each file's sha256, in path order; files hashed in parallel threads
    (hashlib releases the GIL on large buffers), each read once. `say` (a pacer) is told
    how many bytes of how many were read."""
    from concurrent.futures import ThreadPoolExecutor

    total_mb = sum(f[1] for f in files) >> 20
    read = [0]  # bytes read by all threads (a count for people: no lock needed)

    def line():
        return f"digesting: {read[0] >> 20:,} of {total_mb:,} MB read"

    def one(item):
        rel, _, _, full = item
        digest = hashlib.sha256()
        try:
            with open_untrusted(full) as handle:
                why = sparse(handle.fileno(), os.fstat(handle.fileno()))
                if why is not None:  # its holes are not hashed: named instead
                    return f"{rel} ({why}, not hashed)", None
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
                    read[0] += len(block)
                    if say is not None:
                        say(line)
        except (OSError, UnsafeFile):
            return rel, None
        return rel, digest.hexdigest()

    if say is not None:
        say(line, now_anyway=True)  # at once, however fast it turns out

    total = hashlib.sha256()
    with ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as pool:
        for rel, hexdigest in pool.map(one, files):
            if hexdigest is None:
                unreadable.add(rel)
                continue
            total.update(f"{rel}\0{hexdigest}\n".encode("utf-8", "surrogateescape"))
    return total.hexdigest()


def data_command(req):
    """`{"datasets": {name: path}, "deep": bool, "seconds": limit or None}` → each
    dataset's fingerprint; `seconds` bounds them all together (a snapshot's)."""
    say = pacer() if req.get("progress") else None  # a terminal's live line
    return {
        "datasets": fingerprints(req.get("datasets", {}), req.get("deep"), say, req.get("seconds"))
    }


def fingerprints(datasets, deep=False, say=None, seconds=None):
    """{name: fingerprint} of {name: path}, all within `seconds` when given."""
    deadline = None if seconds is None else time.monotonic() + seconds
    return {
        name: dataset_fingerprint(path, deep=bool(deep), say=say, deadline=deadline)
        for name, path in sorted(datasets.items())
    }


COMMANDS["data"] = data_command
