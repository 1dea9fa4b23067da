"""What a generation names lies in its root: its `pip` shim runs `<root>/bin/uv` (pushed to a
remote target, linked or copied from envlock's own on this one), and its `activate` scripts
set the profile's stable venv path, not the generation's own. Moving or re-creating the
checkout envlock runs from, or a `gc` of the generation a shell activated, strands nothing.
"""

import os

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import fsync_dir, sha256_file, write_atomic

# Where uv writes the venv's path into its activate scripts, quoted as each shell reads it.
ACTIVATE_SCRIPTS = ("activate", "activate.csh", "activate.fish", "activate.nu", "activate.bat")


def root_uv(req):
    """`<root>/bin/uv`, put there from the uv this apply runs when that one lies elsewhere
    (a local target runs envlock's own, in the checkout or its venv)."""
    dest = os.path.join(req["root"], "bin", "uv")
    source = req["uv"]
    if os.path.normpath(source) == os.path.normpath(dest) or same_binary(source, dest):
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    st = os.stat(source)
    # A link shares the file: only one this user owns and no one else may write.
    if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not link_into(source, dest):
        # own: envlock's uv binary (req['uv'], envlock's package)
        with open(source, "rb") as handle:
            write_atomic(dest, lambda out: copy_stream(handle, out), 0o755)
    return dest


def same_binary(source, dest):
    try:
        if os.path.samefile(source, dest):
            return True
        if os.path.getsize(source) != os.path.getsize(dest) or os.path.islink(dest):
            return False
    except OSError:
        return False
    return sha256_file(source) == sha256_file(dest)


def link_into(source, dest):
    """A hard link of source at dest, made under a random name and renamed over dest (a name
    planted in advance is never followed); False when the file system refuses links."""
    for _ in range(100):
        tmp = f"{dest}.{os.urandom(6).hex()}.tmp"
        try:
            os.link(source, tmp)
        except FileExistsError:
            continue
        except OSError:
            return False  # another file system, or links not allowed: copy instead
        os.replace(tmp, dest)
        fsync_dir(os.path.dirname(dest))
        return True
    return False


def copy_stream(source, out):
    while True:
        block = source.read(1 << 20)
        if not block:
            return
        out.write(block)


def stable_venv(req):
    """The path a shell should keep: the profile's venv link, else `<root>/current`; both
    follow every switch."""
    return req.get("venv") or os.path.join(req["root"], "current")


def point_activate_at_stable(req, gen_dir):
    """Rewrite the venv path uv wrote into each activate script: VIRTUAL_ENV and the PATH
    entry then name the stable path, whatever generation is active later."""
    stable = stable_venv(req)
    if "'" in stable or '"' in stable or "'" in gen_dir or '"' in gen_dir:
        return  # uv's own quoting of such a path is left as it wrote it
    for name in ACTIVATE_SCRIPTS:
        path = os.path.join(gen_dir, "bin", name)
        try:
            # own: activate scripts uv just wrote into the new generation
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (FileNotFoundError, UnicodeDecodeError):
            continue
        new = text.replace(f"'{gen_dir}'", f"'{stable}'").replace(f'"{gen_dir}"', f'"{stable}"')
        if new != text:
            write_atomic(path, new.encode(), os.stat(path).st_mode & 0o777)
