"""Start-up hook for commands under `envlock run` (this directory is on their PYTHONPATH,
on remote targets as a copy in `<root>/startup/<version>/`). Loads torch's mega-cache before
the script runs when `--compile-artifacts FILE` asked for it, then runs the sitecustomize
this one shadows."""

import envlock_megacache

envlock_megacache.load_from_environment()


def _chain():
    """Run the next sitecustomize on sys.path (e.g. Debian's): ours must not hide it."""
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
