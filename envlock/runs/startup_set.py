"""The startup set: the stdlib-only files a command started by `envlock run` can import.

`sitecustomize` (loads compile artifacts at start-up), `envlock_megacache`, and an `envlock`
package for `envlock.snapshot()` inside the command (startup/envlock_api/envlock), which runs
the agent's probe and runs/snapshot_doc.py in-process. Locally they are read where envlock
is installed; a remote root gets a copy under `<root>/startup/<version>/`, the same layout
as in the envlock package, pushed once per version and verified against its hash on arrival
(like the uv binary).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os

from envlock.base.pythons import own_python
from envlock.errors import OperationError
from envlock.reconcile.agentcode import program
from envlock.targets.base import Transport

# Paths inside the envlock package. The agent is taken whole, as reconcile/agentcall.py does.
# base/flat.py: the trackers' flattening (integrations/tracked.py loads it from beside).
SHARED = ("base/secrets.py", "base/flat.py", "runs/snapshot_doc.py")
STARTUP = (
    "startup/sitecustomize.py",
    "startup/envlock_megacache.py",
    "startup/pipshim/pip.py",  # `python -m pip` in a generation (agent/apply.py write_api)
)
API = "startup/envlock_api/envlock/__init__.py"
COMPLETE = ".complete"


def package_dir() -> str:
    # envlock/runs/startup_set.py -> envlock/ (importlib.resources costs every `run` 2 ms).
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@functools.lru_cache(maxsize=1)
def startup_files() -> dict[str, bytes]:
    """{path inside the package: content} of everything the startup set holds."""
    base = package_dir()
    agent = sorted(
        f"agent/{name}"
        for name in os.listdir(os.path.join(base, "agent"))
        if name.endswith(".py") and name != "__init__.py"
    )
    found = {}
    # The trainer callbacks: the API registers them as its envlock.integrations.
    integrations = sorted(
        f"integrations/{name}"
        for name in os.listdir(os.path.join(base, "integrations"))
        if name.endswith(".py")
    )
    for rel in (*STARTUP, API, *agent, *SHARED, *integrations):
        # own: envlock's own package files
        with open(os.path.join(base, rel), "rb") as handle:
            found[rel] = handle.read()
    return found


def version_of(files: dict[str, bytes]) -> str:
    """The version a set of files is shipped as: a hash of their paths and contents."""
    manifest = "".join(
        f"{rel} {hashlib.sha256(data).hexdigest()}\n" for rel, data in sorted(files.items())
    )
    return hashlib.sha256(manifest.encode()).hexdigest()[:16]


def remote_dir(root: str) -> str:
    return f"{root}/startup/{version_of(startup_files())}"


def python_path(base: str, *, api: bool) -> str:
    """PYTHONPATH for a startup set copied (or installed) at `base`. The `envlock` API goes
    on it only when the environment has no envlock of its own: never shadow a real one."""
    entries = [os.path.join(base, "startup")]
    if api:
        entries.append(os.path.join(base, "startup", "envlock_api"))
    return os.pathsep.join(entries)


# -- shipping to a remote root ------------------------------------------------------------------
# Runs on the target in an isolated interpreter (envlock/base/pythons.py: 3.8+, stdlib only):
# agent/programs/installer.py, with the install the agent's `run` does too (agent/start.py).
# argv: the final dir and its version; stdin: {path: base64}. Files land in a temp dir, are
# hashed back from disk, and only a set whose hash is its version is renamed into place.
INSTALLER = program(("start.py", "programs/installer.py"), "install(sys.argv[1:])")


def startup_payload(root: str) -> dict[str, object]:
    """The startup set as the agent's `run` installs it when the target lacks it."""
    files = startup_files()
    return {
        "dir": remote_dir(root),
        "version": version_of(files),
        "files": {rel: base64.b64encode(data).decode() for rel, data in files.items()},
    }


def ship(transport: Transport, root: str) -> str:
    """Make sure `<root>/startup/<version>/` holds this envlock's startup set; returns it.
    One round trip when it is there (the usual case), two when it has to be pushed."""
    final = remote_dir(root)
    present = transport.run(["test", "-f", f"{final}/{COMPLETE}"])
    if present.ok:
        return final
    files = startup_files()
    payload = json.dumps({rel: base64.b64encode(data).decode() for rel, data in files.items()})
    argv = own_python(transport, INSTALLER, final, version_of(files), root=root)
    result = transport.run(argv, stdin=payload.encode())
    if not result.ok:
        raise OperationError(
            f"{transport.name}: could not install envlock's startup files into {final}: "
            + (result.error_text() or f"exit {result.exit_code}")
        )
    return final
