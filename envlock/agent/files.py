"""The agent's view of a venv's files: the stat manifest, RECORD ownership, verification."""

import contextlib
import json
import os
import re
import time

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import (
        MANIFEST,
        MAX_READ_JSON,
        META_DIR,
        AgentError,
        UnsafeFile,
        open_untrusted,
        pacer,
        read_json,
        record_hash,
        sha256_file,
        write_atomic,
    )
    from envlock.agent.statindex import (
        fast_scan,
        known_entries,
        read_stat_index,
        refresh_stat_index,
        write_stat_index,
    )


# -- venv content -------------------------------------------------------------------------
def walk_files(venv, prefix="", dirs=None):
    """Every file and symlink under a directory, relative (to it, plus `prefix`), envlock's
    own metadata and bytecode caches left out; each directory's stat goes into `dirs`."""
    found = {}
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        where = os.path.join(venv, rel_dir)
        try:
            entries = os.scandir(where)
            if dirs is not None:
                st = os.lstat(where)
                dirs[rel_dir] = [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
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
                found[key] = [st.st_size, st.st_mtime_ns, st.st_ino, st.st_nlink, st.st_ctime_ns]
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
            with open_untrusted(os.path.join(site, name, "RECORD"), MAX_READ_JSON) as handle:
                lines = handle.read().decode("utf-8", errors="replace").splitlines()
        except (OSError, UnsafeFile):
            continue
        prefix = site_rel + "/"
        for line in lines:
            parts = line.rsplit(",", 2)
            if len(parts) != 3 or not parts[0]:
                continue
            path = parts[0]
            # normpath only where it changes something (scripts' ../../../bin/x): 16k
            # calls of it were a third of writing the manifest.
            if "./" in path or "//" in path or path.startswith("/") or path.endswith("/."):
                path = os.path.normpath(os.path.join(site_rel, path))
            else:
                path = prefix + path
            digest = parts[1].split("=", 1)[1] if parts[1].startswith("sha256=") else ""
            owners[path] = (dist, digest)
    return owners


# Files at the top of site-packages that `site` runs in every interpreter, unasked.
STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")


def pth_owners(venv):
    """{dist: [its files]} for the startup code a package installed at the top of
    site-packages: .pth files and sitecustomize.py (what `site` runs at every start);
    those no RECORD lists are the venv's own (uv venv writes them)."""
    site = site_packages(venv)
    if site is None:
        return {}
    site_rel = os.path.relpath(site, venv)
    records = read_records(venv)
    found = {}  # type: dict
    for name in sorted(os.listdir(site)):
        owner = records.get(site_rel + "/" + name)
        if (name.endswith(".pth") or name in STARTUP_FILES) and owner is not None:
            found.setdefault(owner[0], []).append(name)
    return found


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def write_manifest(venv):
    """Stat manifest of every file, with owners; sha256 only for files no RECORD covers.

    An entry is [size, mtime_ns, inode, dist, sha256 or "" (RECORD covers it), nlink,
    ctime_ns]. Manifests of older envlocks end after the sha256 (or the dist)."""
    # Before the walk: creating .envlock would move the top directory's ctime.
    os.makedirs(os.path.join(venv, META_DIR), exist_ok=True)
    owners = read_records(venv)
    dirs = {}  # type: dict
    files = walk_files(venv, dirs=dirs)
    entries = manifest_entries(venv, files, owners)
    # The directories are stored too (the walk's: empty ones included), so finding added
    # files needs no path splitting.
    manifest = {"files": entries, "dirs": sorted(dirs)}
    write_atomic(os.path.join(venv, MANIFEST), json.dumps(manifest).encode())
    write_stat_index(venv, files, dirs)
    # What the venv adds, as du counts it: files no other link holds (uv hardlinks most
    # from its cache, which keeps those whatever happens to the venv).
    own = sum(entry[0] for entry in entries.values() if entry[5] == 1)
    return len(entries), sum(entry[0] for entry in entries.values()), own


def manifest_entries(venv, files, owners):
    """The manifest's entry of each file the walk found: the files no RECORD covers read
    and hashed, a terminal shown how far (a live line: files, and megabytes read)."""
    say = pacer()
    entries = {}
    seen = {"files": 0, "hashed": 0}  # what the line says, when one is due

    def line():
        done, read = seen["files"], seen["hashed"] >> 20
        return f"writing the manifest: {done:,} of {len(files):,} files, {read:,} MB read"

    for rel, (size, mtime, ino, nlink, ctime) in files.items():
        say(line)
        seen["files"] += 1
        dist, digest = owners.get(rel, ("", ""))
        own = ""
        if not digest:
            path = os.path.join(venv, rel)
            own = "link:" + os.readlink(path) if os.path.islink(path) else sha256_file(path)
            seen["hashed"] += size
        entries[rel] = [size, mtime, ino, dist, own, nlink, ctime]
    return entries


def verify_files(venv, deep=False):
    """Compare a generation with its manifest.

    Fast mode lstat()s each recorded file and hashes only those whose size, mtime or inode
    moved, or whose ctime moved while the link count stayed: user space can set mtime back
    but not ctime, while uv hardlinking the same cached file into another venv moves ctime
    and the link count together (no false alarm, no hashing). Deep mode hashes every file
    against the wheels' RECORDs (in threads: hashlib releases the GIL, so this keeps up
    with sha256sum). The fast mode reads the stat index (statindex.py) when the generation
    has one, manifest.json otherwise.
    """
    index = None if deep else read_stat_index(venv)
    if index is not None:
        return verify_from_index(venv, index)
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
        if (
            deep
            or st.st_size != entry[0]
            or st.st_mtime_ns != entry[1]
            or st.st_ino != entry[2]
            or (len(entry) > 6 and st.st_ctime_ns != entry[6] and st.st_nlink == entry[5])
        ):
            suspects.append((rel, entry, st.st_nlink))
    owners = read_records(venv) if suspects else {}
    changed = changes(venv, suspects, owners, deep)
    added = added_files(venv, expected, manifest.get("dirs"))
    return files_report(venv, changed, missing, added, owners, len(expected), deep)


def files_report(venv, changed, missing, added, owners, checked, deep):
    if added:
        owners = owners or read_records(venv)
        for item in added:
            item["dist"] = owners.get(item["path"], ("", ""))[0]
    return {
        "modified": sorted(changed, key=lambda item: item["path"]),
        "missing": sorted(missing, key=lambda item: item["path"]),
        "added": added,
        "checked": checked,
        "deep": bool(deep),
    }


def verify_from_index(venv, index):
    """The fast check from the stat index; manifest.json is read only when something moved
    (for owners and recorded hashes)."""
    scan_started = time.time_ns()
    suspects, gone, listed = fast_scan(venv, index)
    added = added_in(venv, known_entries(index, listed))
    checked = index[0]["files"]
    if not suspects and not gone:
        return files_report(venv, [], [], added, {}, checked, False)
    manifest = read_json(os.path.join(venv, MANIFEST))
    if manifest is None:
        return {"error": "no manifest"}
    unknown = [0, 0, 0, ""]  # the index names a file the manifest does not: no owner
    expected = manifest["files"]
    owners = read_records(venv) if suspects else {}
    entries = [(rel, expected.get(rel, unknown), links) for rel, links, _moved in suspects]
    changed = changes(venv, entries, owners, False)
    remember_unchanged(venv, index, suspects, changed, scan_started)
    missing = [{"path": rel, "dist": expected.get(rel, unknown)[3]} for rel in gone]
    return files_report(venv, changed, missing, added, owners, checked, False)


# A ctime this close to the scan is not recorded: a change made after our lstat, in the
# same clock tick as the one that set it, would show the same ctime (coarse timestamps).
SETTLED_NS = 2_000_000_000


def remember_unchanged(venv, index, suspects, changed, scan_started):
    """Suspects only for a moved ctime whose content proved unchanged: their new stat goes
    into the index, so the next fast check does not hash them again (best effort: a root
    this user cannot write is checked the slow way, as before)."""
    drifted = {item["path"] for item in changed}
    settled = scan_started - SETTLED_NS
    moved = [
        found
        for rel, _links, found in suspects
        if found is not None and rel not in drifted and found[2] < settled
    ]
    if moved:
        with contextlib.suppress(OSError, AgentError):
            refresh_stat_index(venv, index, moved)


def changes(venv, suspects, owners, deep):
    """The suspects ((path, manifest entry, link count)) whose content moved, and why."""
    changed = []
    verdicts = judge_all(venv, suspects, owners, deep)
    for (rel, entry, links), verdict in zip(suspects, verdicts):  # noqa: B905 (py3.8)
        if verdict is not None:
            changed.append({"path": rel, "dist": entry[3], "why": verdict, "links": links})
    return changed


def judge_all(venv, suspects, owners, deep):
    if not deep or len(suspects) < 64:
        return [content_verdict(venv, rel, entry, owners) for rel, entry, _ in suspects]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return list(
            pool.map(lambda s: content_verdict(venv, s[0], s[1], owners), suspects, chunksize=32)
        )


def directories_of(paths):
    """Every directory holding one of `paths` (relative), the venv's top ("") included."""
    known = {""}
    for rel in paths:
        parent = rel.rpartition("/")[0]
        while parent and parent not in known:
            known.add(parent)
            parent = parent.rpartition("/")[0]
    return known


def added_files(venv, expected, known_dirs=None):
    """Files present in the venv that the manifest does not know (new dirs walked whole)."""
    known_dirs = set(known_dirs) if known_dirs is not None else directories_of(expected)
    return added_entries(
        venv, known_dirs, lambda rel_dir, rel: rel in expected or rel in known_dirs
    )


def added_in(venv, known):
    """Entries in the listed directories (`known`: dir -> the names it held) not known."""
    return added_entries(venv, known, lambda rel_dir, rel: rel.rpartition("/")[2] in known[rel_dir])


def added_entries(venv, rel_dirs, is_known):
    added = []
    for rel_dir in rel_dirs:
        try:
            names = os.listdir(os.path.join(venv, rel_dir))
        except OSError:
            continue
        for name in names:
            rel = rel_dir + "/" + name if rel_dir else name
            if is_known(rel_dir, rel) or name == "__pycache__" or rel == META_DIR:
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
    try:  # through the gate: a file swapped for a FIFO or a device is named, never read
        if digest:
            same = record_hash(path) == digest
            return None if same else "content differs from the wheel's RECORD"
        if len(entry) > 4 and entry[4]:
            return None if sha256_file(path) == entry[4] else "content differs from the build"
    except UnsafeFile as exc:
        return f"now {exc.detail}, not a regular file" if exc.why == "kind" else str(exc)
    return "changed since the build"
