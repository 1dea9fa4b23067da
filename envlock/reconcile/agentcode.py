"""The agent's code as it travels: its modules, compressed into one command line (the
bootstrap). Apart from agentcall.py so that it loads light: commands/ahead.py builds a
probe's command line before the transports' modules load."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import zlib

from envlock import agent as agent_package
from envlock.base.usercache import read_entry, write_entry

# What each agent command runs: the probe's modules (in import order: the core, with
# COMMANDS, first), plus the command's own. A probe skips apply's and cache's imports.
AGENT_BASE = ("core.py", "statindex.py", "files.py", "gpu.py", "probe.py")
AGENT_EXTRA = {
    "apply": ("adopt.py", "rooted.py", "apply.py"),
    "cache": ("cache.py",),
    "survey": ("survey.py",),
    "data": ("dataset.py",),
    "run": ("launch.py",),
}

# Unpacks and compiles the agent's modules into one namespace and runs it. The compiled code
# is kept per envlock build and interpreter (~/.cache/envlock on the target, written
# atomically; anything unreadable there is compiled afresh), so a probe does not compile
# 1,700 lines each time. The code is ours: it came in this command line, and the key is its
# hash. The directory is used only while it is this user's and no one else may write it
# (`mine`): a file planted there would run as this user. The cache file is written by the
# agent's own write_atomic (exclusive temp file, never through a link), once it is loaded;
# then the agent's prune_compiled removes those an older envlock left (core.py).
BOOTSTRAP = """\
import binascii,marshal,os,sys,zlib
g={'__name__':'envlock_agent','__envlock_agent__':True}
k=%(key)r
d=os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),'envlock')
t=sys.implementation.cache_tag and os.path.isabs(d)
f=os.path.join(d,'agent-%%s-%%s'%%(k,sys.implementation.cache_tag))
def mine():
    s=os.lstat(d)
    return s.st_uid==os.getuid() and not s.st_mode&0o022 and os.path.isdir(d)
c=None
if t:
    try:
        if mine():
            with open(f,'rb') as h: c=marshal.loads(h.read())
    except Exception: c=None
w=t and not isinstance(c,list)
if not isinstance(c,list):
    s=%(packed)r
    c=[compile(zlib.decompress(binascii.a2b_base64(p)),'envlock-agent/'+n,'exec') for n,p in s]
for x in c: exec(x,g)
if w:
    try:
        os.makedirs(d,0o700,exist_ok=True)
        if mine(): g['write_atomic'](f,marshal.dumps(c),0o600); g['prune_compiled'](d,f)
    except Exception: pass
sys.exit(g['main']())
"""


def agent_modules(command: str) -> tuple[str, ...]:
    return AGENT_BASE + AGENT_EXTRA.get(command.split("-", 1)[0], ())


@functools.cache
def agent_bootstrap(command: str = "probe") -> str:
    """The one-line program that runs agent `command` (compressed: the command line stays
    small, and base64 needs no quoting care)."""
    sources = [(name, agent_source(name)) for name in agent_modules(command)]
    packed = packed_sources(sources)
    key = hashlib.sha256(repr(packed).encode()).hexdigest()[:20]
    return BOOTSTRAP % {"key": key, "packed": packed}


# Compressing the agent's modules costs every command ~5-10 ms of CPU (zlib at level 9), for
# the same bytes each time: the result is kept in this user's cache (usercache.py), by the
# hash of the sources, and used only when it decompresses back to exactly these sources.
PACKED = "agent-packed"


def packed_sources(sources: list[tuple[str, bytes]]) -> list[tuple[str, str]]:
    key = [1, hashlib.sha256(repr(sources).encode()).hexdigest()]
    kept = unpacked_as(read_entry(PACKED, key), sources)
    if kept is not None:
        return kept
    packed = [(name, base64.b64encode(zlib.compress(text, 9)).decode()) for name, text in sources]
    write_entry(PACKED, key, packed)
    return packed


def unpacked_as(data: object, sources: list[tuple[str, bytes]]) -> list[tuple[str, str]] | None:
    """The kept entry when it is these sources, compressed (the code that will run), else None."""
    if not isinstance(data, list) or len(data) != len(sources):
        return None
    packed = []
    for entry, (name, text) in zip(data, sources, strict=True):
        if not (isinstance(entry, list) and len(entry) == 2 and entry[0] == name):
            return None
        if not isinstance(entry[1], str):
            return None
        try:
            if zlib.decompress(binascii.a2b_base64(entry[1])) != text:
                return None
        except (ValueError, zlib.error):
            return None
        packed.append((name, entry[1]))
    return packed


def agent_source(name: str) -> bytes:
    # Beside envlock/agent/__init__.py (importlib.resources would cost more than the read).
    with open(os.path.join(os.path.dirname(agent_package.__file__), name), "rb") as handle:
        return handle.read()
