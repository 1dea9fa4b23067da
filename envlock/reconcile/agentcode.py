"""The agent's code as it travels: its modules, compressed into one command line (the
bootstrap), and the other programs that run alone on a target (the launcher, the installer),
each built from the source text of its modules in envlock/agent/. Apart from agentcall.py so
that it loads light: commands/ahead.py builds a probe's command line before the transports'
modules load."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import re
import zlib

from envlock import agent as agent_package
from envlock.base.usercache import read_entry, write_entry

# What each agent command runs: the probe's modules (in import order: the core, with
# COMMANDS, first), plus the command's own. A probe skips apply's and cache's imports.
AGENT_BASE = ("core.py", "statindex.py", "files.py", "gpu.py", "cuda.py", "probe.py")
AGENT_EXTRA = {
    "apply": ("adopt.py", "rooted.py", "apply.py"),
    "cache": ("cache.py",),
    "survey": ("survey.py",),
    "data": ("dataset.py",),
    "run": ("start.py", "launch.py"),
}
# The bootstrap (agent/programs/bootstrap.py) unpacks, compiles (once per envlock build and
# interpreter, kept on the target) and runs those modules.
BOOTSTRAP = ("programs/bootstrap.py",)


def agent_modules(command: str) -> tuple[str, ...]:
    return AGENT_BASE + AGENT_EXTRA.get(command.split("-", 1)[0], ())


@functools.cache
def agent_bootstrap(command: str = "probe") -> str:
    """The program that runs agent `command`: the bootstrap, called with the agent's modules
    compressed (the command line stays small, and base64 needs no quoting care)."""
    sources = [(name, agent_source(name)) for name in agent_modules(command)]
    packed = packed_sources(sources)
    key = hashlib.sha256(repr(packed).encode()).hexdigest()[:20]
    return program(BOOTSTRAP, f"bootstrap({key!r}, {packed!r})")


def program(modules: tuple[str, ...], call: str) -> str:
    """A program for `python -c` (envlock/base/pythons.py's own_python): the agent's `modules`
    (paths in envlock/agent/), in order, then `call`, which starts it. In one namespace the
    modules need not import each other: their repository-only imports are left out."""
    sources = [REPO_ONLY.sub("", agent_source(name).decode()) for name in modules]
    return "\n".join([*sources, call]) + "\n"


# An agent module's imports of its siblings, for the repository only (`if "__envlock_agent__"
# not in globals():` and its indented lines).
REPO_ONLY = re.compile(r'^if "__envlock_agent__" not in globals\(\):.*\n(?:[ \t]+.*\n|\n)*', re.M)


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
    # own: envlock's own agent sources
    with open(os.path.join(os.path.dirname(agent_package.__file__), name), "rb") as handle:
        return handle.read()
