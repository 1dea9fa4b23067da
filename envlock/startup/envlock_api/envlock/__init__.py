"""`import envlock` in a training environment, without envlock in the lock.

    import envlock
    envlock.snapshot(ckpt_dir, config=args)   # writes ckpt_dir/envlock-snapshot.json

This is not envlock itself but its in-process API: a stdlib-only package that `envlock run`
puts on the command's PYTHONPATH when the environment installs no `envlock` of its own, and
that each generation envlock builds carries in .envlock/api (a .pth appends it to sys.path),
so a script its python starts directly imports it too. Outside `envlock run` it records what
it can, `"verified": false`, and says so on stderr. It
records what `envlock snapshot` records, gathered in this very process by the agent's probe
(package metadata, torch's version.py, the GPUs, the compile cache: no torch import, no file
hashing but the pinned scripts), plus the process's own view: its argv, its config and its
place in a distributed run. The document is built by envlock/runs/snapshot_doc.py, the same
function the CLI uses.

The modules it runs (the agent, base/secrets.py, runs/snapshot_doc.py) are read from beside
it: three levels up is the envlock package, or the copy of it `envlock run` installs in a
remote root (`<root>/startup/<version>/`).

Compatible with Python 3.8+ (the environment's interpreter is not envlock's to choose).
"""

import hashlib
import json
import os
import sys


def _real_envlock():
    """A real envlock further down sys.path (envlock's own venv, or a tool's, started under
    `envlock run`): it is the one to import, never hidden behind this API."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        try:
            spec = find("envlock", rest) if find is not None else None
        except Exception:  # a finder that cannot answer is no answer
            continue
        # A directory named envlock without __init__ (a namespace portion) is no envlock.
        if spec is None or spec.loader is None or spec.origin in (None, "namespace"):
            continue
        # Another copy of this API (the generation's own, under .envlock/api) is no envlock.
        if os.path.basename(os.path.dirname(os.path.dirname(spec.origin))) == "envlock_api":
            continue
        if spec.origin != os.path.abspath(__file__):
            return spec
    return None


def _become(spec):
    """Load the real envlock in place of this module (the import returns sys.modules')."""
    import importlib.util

    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


_REAL = _real_envlock()
if _REAL is not None:
    _become(_REAL)

__all__ = ["snapshot"]

# envlock/startup/envlock_api/envlock/__init__.py -> envlock/
PACKAGE = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
# The agent's core first: snapshot_doc's write_file calls its write_atomic.
SHARED = ("agent/core.py", "base/secrets.py", "agent/datanames.py", "runs/snapshot_doc.py")

_loaded = {}  # type: dict  # name -> namespace, loaded once per process


def _integrations():
    """`envlock.integrations` (the trainer callbacks) from the one copy of them: the
    package's integrations/ folder, which the startup set ships beside this API. Registered
    as this package's subpackage, its own __path__ that folder, so `import
    envlock.integrations.transformers` works in a training environment as in envlock's own
    venv, with one implementation (the folder is stdlib only, Python 3.8+). This package's
    own __path__ is left alone: nothing else of envlock becomes importable through it."""
    import importlib.util

    folder = os.path.join(PACKAGE, "integrations")
    spec = importlib.util.spec_from_file_location(
        __name__ + ".integrations",
        os.path.join(folder, "__init__.py"),
        submodule_search_locations=[folder],
    )
    if spec is None or spec.loader is None or not os.path.isdir(folder):
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before it runs: its submodules import it by name
    spec.loader.exec_module(module)
    return module


if _REAL is None:  # when this API became the real envlock, that one has its own
    integrations = _integrations()


class NotUnderEnvlockRun(RuntimeError):
    """envlock.snapshot() was called in a process that `envlock run` did not start."""


def snapshot(directory, profile=None, config=None, *, all_ranks=False, data=None, metrics=None):
    """Record this run's environment (and its `config`) into DIRECTORY/envlock-snapshot.json.

    Called like envlock's own `envlock.snapshot`; `profile` is accepted and unused: the
    profile recorded is the one `envlock run` started this command with.

    `config`: a dict, an argparse.Namespace, a dataclass, or any object with `model_dump()`
    or `to_dict()` (pydantic, OmegaConf); secrets in it are redacted. `data`: {name: path}
    of datasets the run read, fingerprinted with the profile's [data] (files, bytes, digests
    of the listing and of a sample; a path not there is recorded as missing). `metrics`:
    {name: number} the run measured (tok/s, step), finite numbers. In a distributed run
    only global rank 0 writes (others return None) unless `all_ranks`: then every rank
    writes envlock-snapshot.rank{N}.json. Returns the path written.
    """
    run = run_context()
    doc = namespace("doc", SHARED)
    measured = doc["checked_metrics"](metrics)  # ValueError on a bad one, on every rank
    named = doc["checked_data"](data)
    place = doc["rank_of"](os.environ)
    if place["rank"] != 0 and not all_ranks:
        return None
    probe = gather(run)
    fingerprints = namespace("agent", agent_files())["fingerprints"]
    datasets = profile_datasets(run, fingerprints, set(named))
    if named:
        paths = {name: os.path.abspath(path) for name, path in named.items()}
        datasets.update(fingerprints(paths, seconds=doc["DATA_SECONDS"]))
    text = lock_text(run, probe)
    data = doc["document"](
        probe=probe,
        profile=run["profile"],
        lock={"sha256": hashlib.sha256(text.encode()).hexdigest(), "text": text},
        environ=os.environ,
        profile_env=run["env"],
        command=list(sys.argv),
        target=run["target"],
        git=doc["git_state"]((run["scripts"] or {}).get("source")),
        config=config,
        process=dict(place, argv=list(sys.argv)),
        envlock_version=run["envlock"],
        datasets=datasets,
        metrics=measured,
    )
    data["verified"] = run["verified"]
    if not run["verified"]:
        data["generation"] = run["generation"]  # this Python's, whichever is active
    name = doc["snapshot_name"](place["rank"] if all_ranks else None)
    path = os.path.join(os.fspath(directory), name)
    doc["write_file"](path, (json.dumps(data, indent=1) + "\n").encode())
    return path


_profile_data = {}  # type: dict  # the profile's [data] fingerprints of this process


def profile_datasets(run, fingerprints, named):
    """The fingerprints of the profile's [data] (but those `data=` names again), taken once
    per process: a trainer's callback snapshots every few hundred steps, and each snapshot
    of the run records the datasets as the run found them, not another walk of them."""
    wanted = {k: v for k, v in (run.get("data") or {}).items() if k not in named}
    key = json.dumps(wanted, sort_keys=True)
    if key not in _profile_data:
        seconds = namespace("doc", SHARED)["DATA_SECONDS"]
        _profile_data[key] = fingerprints(wanted, seconds=seconds) if wanted else {}
    return dict(_profile_data[key])


NOT_VERIFIED = (
    "envlock.snapshot(): this process was not started by `envlock run`, so the environment "
    "was not verified against its lock; recorded what this process sees of generation {} "
    '("verified": false). Start it with `envlock run PROFILE -- …`, or run `envlock check '
    "PROFILE`, for a verified record"
)


def run_context():
    """What `envlock run` exported for this command (ENVLOCK_RUN_CONTEXT, ENVLOCK_ROOT, …);
    outside it, what the generation this Python belongs to recorded when it was built."""
    names = ("ENVLOCK_RUN_CONTEXT", "ENVLOCK_ROOT", "ENVLOCK_GENERATION")
    missing = [name for name in names if not os.environ.get(name)]
    if missing:
        return outside_context(missing)
    run = json.loads(os.environ["ENVLOCK_RUN_CONTEXT"])
    run["root"] = os.environ["ENVLOCK_ROOT"]
    run["generation"] = os.environ["ENVLOCK_GENERATION"]
    run["verified"] = True  # `envlock run` checked it before starting the command
    return run


def outside_context(missing):
    """The run context of a script the generation's python started directly (an IDE, a
    notebook, a scheduler line): the generation from sys.prefix, the profile as of its
    build (.envlock/api/context.json); said on stderr, and `verified` false."""
    gen = os.path.realpath(sys.prefix)
    if not os.path.isfile(os.path.join(gen, ".envlock", "generation.json")):
        raise NotUnderEnvlockRun(
            "envlock.snapshot() needs a process started by `envlock run PROFILE -- CMD` "
            "({} not set) or an envlock generation's python ({} is none): run the script "
            "through envlock run, or call `envlock snapshot PROFILE DIR` from outside".format(
                ", ".join(missing), sys.prefix
            )
        )
    run = {
        "envlock": "",
        "profile": {"name": "unknown", "path": None, "sha256": None},
        "cache_dir": None,
        "scripts": None,
        "env": [],
        "target": "",
        "data": {},
    }  # type: dict
    try:
        # own: what envlock's build wrote beside this API in the generation
        with open(os.path.join(gen, ".envlock", "api", "context.json")) as handle:
            built = json.load(handle)
        run.update((k, v) for k, v in built.items() if k in run)
    except (OSError, ValueError, AttributeError):
        pass
    run.update(
        root=os.path.dirname(os.path.dirname(gen)),
        generation=os.path.basename(gen),
        verified=False,
    )
    sys.stderr.write(NOT_VERIFIED.format(run["generation"]) + "\n")
    return run


def namespace(name, files):
    """Run stdlib-only modules of the envlock package in one namespace (once)."""
    if name not in _loaded:
        space = {"__name__": "envlock_" + name, "__envlock_agent__": True}
        for rel in files:
            path = os.path.join(PACKAGE, rel)
            # own: envlock's own package files
            with open(path) as handle:
                exec(compile(handle.read(), path, "exec"), space)
        _loaded[name] = space
    return _loaded[name]


def agent_files():
    """The agent's modules, its core first (the others register in its COMMANDS)."""
    names = sorted(n for n in os.listdir(os.path.join(PACKAGE, "agent")) if n.endswith(".py"))
    rest = [n for n in names if n not in ("__init__.py", "core.py")]
    return ["agent/" + n for n in ["core.py", *rest]]


def gather(run):
    """The agent's probe of this root, run in this process: metadata only, no verify."""
    scripts = run["scripts"]
    request = {
        "root": run["root"],
        "venv": None,
        "cache_dir": run["cache_dir"],
        "scripts": {"dest": scripts["dest"], "files": scripts["files"]} if scripts else None,
        "deep": False,
        "verify": False,
        "warmth": True,
        "active_lock": True,
        "uv": None,
    }
    return namespace("agent", agent_files())["probe"](request)


def lock_text(run, probe):
    """The lock this generation was built from (its own copy), else the profile's lock."""
    agent = namespace("agent", agent_files())
    candidates = [os.path.join(run["root"], "generations", run["generation"], agent["LOCK_COPY"])]
    if run["profile"].get("path"):
        candidates.append(
            os.path.join(
                os.path.dirname(run["profile"]["path"]),
                "pylock.{}.toml".format(run["profile"]["name"]),
            )
        )
    if probe.get("active_lock") and run["verified"]:  # outside run: this Python's own lock
        return probe["active_lock"]
    for path in candidates:
        try:  # through the agent's gate: a FIFO or a device there blocks no one
            with agent["open_untrusted"](path, agent["MAX_READ_JSON"]) as handle:
                return handle.read().decode()
        except (OSError, ValueError, agent["UnsafeFile"]):
            continue
    raise NotUnderEnvlockRun(
        "envlock.snapshot(): the lock of generation {} is in none of {}".format(
            run["generation"], ", ".join(candidates)
        )
    )
