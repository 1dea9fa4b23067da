"""The stat index: what the fast check compares, in a form the agent loads in milliseconds.

manifest.json stays the record of a generation (owners and hashes, for deep checks and
reports); this file repeats only the stat fields, grouped by directory: the names as one
NUL-separated block and the numbers as one array of 64-bit integers, so a check of 16k files
parses no JSON objects and lstat()s each name relative to its open directory, as `find`
does. Each directory carries its own stat too: while its ctime has not moved, no entry was
added, removed or renamed in it (user space cannot set ctime back), so it is not listed.
"""

import array
import contextlib
import json
import os
import sys

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import META_DIR, write_atomic

STAT_INDEX = META_DIR + "/stat-index"
MAGIC = b"envlock-stat-index 1\n"
DIR_FIELDS = 5  # first file, file count, inode, mtime_ns, ctime_ns
FILE_FIELDS = 5  # size, mtime_ns, inode, nlink, ctime_ns


def write_stat_index(venv, files, dirs):
    """Write the index of `files` (rel -> [size, mtime, ino, nlink, ctime]) and `dirs`
    (rel -> [ino, mtime, ctime], the top as ""). False when a number does not fit."""
    names_by_dir = {rel_dir: [] for rel_dir in dirs}  # type: dict
    for rel, stat in files.items():
        parent, _, name = rel.rpartition("/")
        names_by_dir[parent].append((name, stat))
    order = sorted(dirs)
    numbers, names = [], []  # type: list, list
    for rel_dir in order:
        numbers += [len(names), len(names_by_dir[rel_dir]), *dirs[rel_dir]]
        names += sorted(names_by_dir[rel_dir])
    for _name, stat in names:
        numbers += stat
    path = os.path.join(venv, STAT_INDEX)
    try:
        packed = array.array("q", numbers).tobytes()
    except OverflowError:
        remove_quietly(path)  # a filesystem with 64-bit unsigned inodes: the slow path
        return False

    def fill(handle):
        # Sealed: a directory changed in the same clock tick as this file may show the same
        # ctime after a later change (coarse kernel timestamps), so such ones are always listed.
        sealed = os.fstat(handle.fileno()).st_ctime_ns
        dir_block = encode_names(order)
        name_block = encode_names(name for name, _stat in names)
        header = {
            "byteorder": sys.byteorder,
            "sealed": sealed,
            "dirs": len(order),
            "files": len(names),
            "dir_bytes": len(dir_block),
            "name_bytes": len(name_block),
        }
        handle.write(MAGIC + json.dumps(header).encode() + b"\n")
        handle.write(dir_block + name_block + packed)

    write_atomic(path, fill)
    return True


def encode_names(names):
    """NUL-joined, as the filesystem spells them (os.fsencode's encoding, all at once)."""
    return "\0".join(names).encode(sys.getfilesystemencoding(), "surrogateescape")


def decode_names(block):
    return block.decode(sys.getfilesystemencoding(), "surrogateescape").split("\0")


def remove_quietly(path):
    with contextlib.suppress(OSError):
        os.unlink(path)


def read_stat_index(venv):
    """(header, dirs, names, numbers), or None when absent, of another machine's byte order,
    or damaged (the caller then reads manifest.json)."""
    try:
        # own: envlock's stat index in the generation's .envlock/
        with open(os.path.join(venv, STAT_INDEX), "rb") as handle:
            data = handle.read()
        if not data.startswith(MAGIC):
            return None
        end = data.index(b"\n", len(MAGIC))
        header = json.loads(data[len(MAGIC) : end])
        if header["byteorder"] != sys.byteorder:
            return None
        start = end + 1
        middle = start + header["dir_bytes"]
        stop = middle + header["name_bytes"]
        dirs = decode_names(data[start:middle])
        names = decode_names(data[middle:stop])
        numbers = array.array("q")
        numbers.frombytes(data[stop:])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not header["files"]:
        names = []
    sizes_ok = (
        len(dirs) == header["dirs"]
        and len(names) == header["files"]
        and len(numbers) == DIR_FIELDS * len(dirs) + FILE_FIELDS * len(names)
        and contiguous(numbers, len(dirs), len(names))
    )
    return (header, dirs, names, numbers) if sizes_ok else None


def contiguous(numbers, dir_count, name_count):
    """Each directory's files follow the previous directory's, and together they are all."""
    expected = 0
    for k in range(dir_count):
        first, count = numbers[DIR_FIELDS * k], numbers[DIR_FIELDS * k + 1]
        if first != expected or count < 0:
            return False
        expected += count
    return expected == name_count


def fast_scan(venv, index):
    """lstat every indexed file relative to its directory. Returns (suspects, missing,
    listed): files whose stat moved [(rel, nlink, moved)], files gone [rel], and directories
    to list for added entries (ctime moved, or too young to trust). `moved` is, for a file
    whose size, mtime and inode are as indexed and only its ctime moved (its link count as
    indexed), (its place in the index, nlink, ctime): what refresh_stat_index records once
    its content is found unchanged; None for any other suspect."""
    header, dirs, names, numbers = index
    sealed = header["sealed"]
    file_base = DIR_FIELDS * len(dirs)
    lstat = os.lstat
    suspects = []  # type: list
    missing, listed = [], []  # type: list, list
    for k, rel_dir in enumerate(dirs):
        first, count, ino, mtime, ctime = numbers[DIR_FIELDS * k : DIR_FIELDS * (k + 1)]
        where = venv + "/" + rel_dir if rel_dir else venv
        try:
            fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            fd = None  # gone or replaced: each file by its full path, so each is reported
        try:
            now = os.fstat(fd) if fd is not None else None
            if (
                now is None
                or ctime >= sealed
                or (now.st_ino, now.st_mtime_ns, now.st_ctime_ns) != (ino, mtime, ctime)
            ):
                listed.append(rel_dir)
            i = file_base + FILE_FIELDS * first
            for name in names[first : first + count]:
                try:
                    st = lstat(name, dir_fd=fd) if fd is not None else lstat(where + "/" + name)
                except OSError:
                    missing.append(rel_dir + "/" + name if rel_dir else name)
                    i += FILE_FIELDS
                    continue
                # The same rule as manifest.json's check (files.verify_files says why),
                # inline: a call per file would cost a tenth of this loop.
                if (
                    st.st_size != numbers[i]
                    or st.st_mtime_ns != numbers[i + 1]
                    or st.st_ino != numbers[i + 2]
                ):
                    suspects.append((rel_dir + "/" + name if rel_dir else name, st.st_nlink, None))
                elif st.st_ctime_ns != numbers[i + 4] and st.st_nlink == numbers[i + 3]:
                    moved = (i, st.st_nlink, st.st_ctime_ns)
                    suspects.append((rel_dir + "/" + name if rel_dir else name, st.st_nlink, moved))
                i += FILE_FIELDS
        finally:
            if fd is not None:
                os.close(fd)
    return suspects, missing, listed


def known_entries(index, listed):
    """For each listed directory, the names the index knows in it (files and directories)."""
    _header, dirs, names, numbers = index
    wanted = set(listed)
    known = {rel_dir: set() for rel_dir in listed}  # type: dict
    for k, rel_dir in enumerate(dirs):
        if rel_dir in wanted:
            first, count = numbers[DIR_FIELDS * k], numbers[DIR_FIELDS * k + 1]
            known[rel_dir].update(names[first : first + count])
        parent, _, name = rel_dir.rpartition("/")
        if rel_dir and parent in wanted:
            known[parent].add(name)
    return known


def refresh_stat_index(venv, index, moved):
    """Record the new ctime and link count of files whose content was just found unchanged
    (`moved`: fast_scan's (place, nlink, ctime) of each). Another venv hardlinked from uv's
    cache and then removed leaves the link count where it was and ctime moved: without this,
    every later fast check hashed those files again (16k files: 0.15 s became 0.8 s, for
    good). The header stays as it is (its seal included): only those numbers change."""
    header, dirs, names, numbers = index
    numbers = array.array("q", numbers)
    for place, nlink, ctime in moved:
        numbers[place + 3], numbers[place + 4] = nlink, ctime
    path = os.path.join(venv, STAT_INDEX)

    def fill(handle):
        handle.write(MAGIC + json.dumps(header).encode() + b"\n")
        handle.write(encode_names(dirs) + encode_names(names) + numbers.tobytes())

    write_atomic(path, fill)
