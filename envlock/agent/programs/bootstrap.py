"""The agent's bootstrap: unpacks and compiles the agent's modules into one namespace and
runs the command (envlock/reconcile/agentcode.py builds the call with the modules, packed).

The compiled code is kept per envlock build and interpreter (~/.cache/envlock on the target,
written atomically; anything unreadable there is compiled afresh), so a probe does not
compile 1,700 lines each time. The code is ours: it came in this command line, and the key is
its hash. The directory is used only while it is this user's and no one else may write it
(`cache_is_mine`): a file planted there would run as this user. The cache file is written by
the agent's own write_atomic (exclusive temp file, never through a link), once it is loaded;
then the agent's prune_compiled removes those an older envlock left (agent/core.py).

Shipped as this module, then `bootstrap(KEY, PACKED)`.
"""

import binascii
import marshal
import os
import sys
import zlib


def bootstrap(key, packed):
    """Run the agent of `packed` ([(name, base64 of zlib)]), compiled once per `key`."""
    space = {"__name__": "envlock_agent", "__envlock_agent__": True}  # type: dict
    cache = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "envlock"
    )
    tag = sys.implementation.cache_tag
    usable = tag and os.path.isabs(cache)
    kept = os.path.join(cache, f"agent-{key}-{tag}")
    code = compiled_from(cache, kept) if usable else None
    fresh = not isinstance(code, list)
    if not isinstance(code, list):
        code = [
            compile(zlib.decompress(binascii.a2b_base64(text)), "envlock-agent/" + name, "exec")
            for name, text in packed
        ]
    for module in code:
        exec(module, space)
    if usable and fresh:
        keep_compiled(space, cache, kept, code)
    sys.exit(space["main"]())


def cache_is_mine(cache):
    """The ownership rule (agent/core.py's `untrusted`) for the cache dir alone, cheaply."""
    st = os.lstat(cache)
    return st.st_uid == os.getuid() and not st.st_mode & 0o022 and os.path.isdir(cache)


def compiled_from(cache, kept):
    """The code kept at `kept`, when the cache is ours; None (compile afresh) otherwise."""
    try:
        if cache_is_mine(cache):
            with open(kept, "rb") as handle:
                return marshal.loads(handle.read())
    except Exception:
        return None
    return None


def keep_compiled(space, cache, kept, code):
    """Keep `code` for the next call, written by the agent's own write_atomic (a cache that
    is not ours, or any failure, is only a cache missed)."""
    try:
        os.makedirs(cache, 0o700, exist_ok=True)
        if cache_is_mine(cache):
            space["write_atomic"](kept, marshal.dumps(code), 0o600)
            space["prune_compiled"](cache, kept)
    except Exception:
        pass
