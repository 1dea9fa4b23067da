"""Start-up hook for commands under `envlock run` (this directory is on their PYTHONPATH,
on remote targets as a copy in `<root>/startup/<version>/`). Loads torch's mega-cache before
the script runs when `--compile-artifacts FILE` asked for it, then runs the sitecustomize
this one shadows.

Every Python the command starts runs this first: the mega-cache module (json, struct, the
atomic write) is imported only when there is a file to load, so a plain command pays for
none of it."""

import os

if os.environ.get("ENVLOCK_COMPILE_ARTIFACTS") and not os.environ.get(
    "ENVLOCK_COMPILE_ARTIFACTS_LOADED"
):
    import envlock_megacache

    envlock_megacache.load_from_environment()


def _chain():
    """Run the next sitecustomize on sys.path (e.g. Debian's): ours must not hide it.
    PathFinder is the import system's own (already loaded); importlib.util would import
    contextlib, collections and functools into every command for one module object."""
    import sys
    from importlib.machinery import PathFinder

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = type(sys)(spec.name)
        module.__spec__, module.__loader__, module.__file__ = spec, spec.loader, spec.origin
        spec.loader.exec_module(module)


_chain()
