"""The startup set's installer (envlock/runs/startup_set.py ships it): argv the final dir and
its version, stdin {path: base64}. The files land in a temp dir, are hashed back from disk,
and only a set whose hash is its version is renamed into place (agent/start.py); a corrupted
one exits 3 and leaves nothing.

Shipped as agent/start.py, then this module, then `install(sys.argv[1:])`.
"""

import json
import sys

if "__envlock_agent__" not in globals():  # in the repository; shipped, one program
    from envlock.agent.start import install_startup_set

CORRUPTED = 3  # envlock's exit status for an operation that failed


def install(args):
    final, version = args[0], args[1]
    if not install_startup_set(final, version, json.load(sys.stdin)):
        sys.stderr.write("envlock: the startup files arrived corrupted\n")
        sys.exit(CORRUPTED)
