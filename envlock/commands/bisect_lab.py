"""Bisect's lab: each probe a real generation, each measurement a run.

A probe's lock is GOOD's with some packages as BAD's lock has them, checked twice before
anything is built: uv resolves its pins to exactly that set (a package whose new version
needs another's is otherwise refused, never guessed), and the lock validator reads it like
any stranger's lock (a snapshot's policy: nothing built from source, wheels from https:// or
the profile's find-links). converge builds it as a held generation (as `apply
--from-snapshot` does), kept for every later probe with the same packages. Each run switches
to the probe's generation and starts CMD as `envlock run` does: the drift check first (its
refusal is an error here), then the generation's interpreter first on PATH, its compile
cache, the profile's [env] with the probe's variables. The active generation (and its hold)
is restored at the end, however bisect ends, and the probes built are removed unless kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envlock.base.atomic import write_atomic
from envlock.commands.run import passed_env, verdict
from envlock.converge.converge import converge
from envlock.errors import EnvlockError, OperationError, UsageError
from envlock.lock.links import find_links_for, resolver_env
from envlock.lock.policy import snapshot_policy
from envlock.lock.read import Lock, parse_lock
from envlock.lock.schema import lock_data
from envlock.profile.read import Profile
from envlock.reconcile.context import Context, Probe, check_all, gather_state
from envlock.reconcile.execute import execute
from envlock.reconcile.plan import Action, Plan
from envlock.reconcile.state import State
from envlock.runs.bisect import Difference, Recipe, pins, recipe
from envlock.runs.describe import flatten, load_side
from envlock.runs.diff import MANAGED_ENV
from envlock.runs.environment import SCRUBBED, command_environment, generation_dir
from envlock.runs.launch import KILLED, remote_spec, run_remote_captured

SNAPSHOT_FILE = "envlock-snapshot.json"
REDACTED_PREFIX = "<redacted sha256:"
# Statuses that say CMD did not run at all (a shell's "cannot execute", "not found").
NOT_RUN = (126, 127)


# -- the two sides -------------------------------------------------------------------------
@dataclass(frozen=True)
class End:
    """GOOD or BAD as bisect reads it: the lock to rebuild, what the run recorded."""

    label: str
    lock: Lock
    env: dict[str, str] = field(default_factory=dict)
    warm: bool | None = None  # the compile cache's warmth (None: not recorded)
    config: dict[str, Any] = field(default_factory=dict)
    python: str | None = None
    scripts: dict[str, Any] = field(default_factory=dict)
    is_run: bool = False


def read_end(path: str) -> End:
    """A snapshot, a directory holding one, or a lock; refused when it has no lock."""
    side = load_side(path)
    if side.lock is None:
        raise UsageError(
            f"{path}: no lock to rebuild",
            hint="pass an envlock-snapshot.json, a directory holding one, or a pylock.*.toml",
        )
    record = side.snapshot
    if record is None:
        return End(path, side.lock, python=str(side.lock.meta.get("python-version") or ""))
    cache = record.cache
    return End(
        path,
        side.lock,
        env={k: v for k, v in record.env.items() if k not in MANAGED_ENV},
        warm=None if cache is None else bool(cache.exists and cache.files),
        config=flatten(record.config) if isinstance(record.config, dict) else {},
        python=str(side.lock.meta.get("python-version") or ""),
        scripts=dict(record.scripts),
        is_run=True,
    )


def not_tried(good: End, bad: End, mapped_config: set[str]) -> list[str]:
    """What differs but no probe reproduces: said with the answer."""
    notes = []
    if good.python != bad.python:
        notes.append(f"Python {good.python} → {bad.python} (each probe keeps GOOD's)")
    if good.scripts != bad.scripts:
        notes.append("the scripts (check out the code of the run you want to test)")
    hidden = [k for k in {*good.env, *bad.env} if is_redacted(good.env.get(k), bad.env.get(k))]
    notes += [f"{name} (recorded redacted)" for name in sorted(hidden)]
    config = {k for k in {*good.config, *bad.config} if good.config.get(k) != bad.config.get(k)}
    left = sorted(config - mapped_config)
    if left:
        notes.append(
            f"{len(left)} config value(s) ({', '.join(left[:3])}{' …' if len(left) > 3 else ''}): "
            "map one with --config KEY"
        )
    return notes


def is_redacted(*values: str | None) -> bool:
    return any(isinstance(v, str) and v.startswith(REDACTED_PREFIX) for v in values)


def reproducible_env(end: End, other: End) -> dict[str, str]:
    return {k: v for k, v in end.env.items() if not is_redacted(v, other.env.get(k))}


# -- resolution ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Resolved:
    """uv's word on a set of pins: whether it resolves to exactly that set, and who needs
    whom among them (name → the packages that require it)."""

    ok: bool
    needs: dict[str, set[str]]
    why: str = ""


def resolve_pins(profile: Profile, versions: dict[str, str]) -> Resolved:
    """`uv pip compile` of `name==version` for every pin, from the profile's sources."""
    from envlock.lock.indexes import uv_index_env
    from envlock.lock.resolve import uv_compile_argv

    with tempfile.TemporaryDirectory(prefix="envlock-bisect-") as tmp:
        given = Path(tmp) / "probe.in"
        write_atomic(given, "".join(f"{n}=={v}\n" for n, v in versions.items()).encode())
        out = Path(tmp) / "probe.txt"
        argv = uv_compile_argv(profile, given, out, find_links_for(profile))
        argv[argv.index("--format") + 1] = "requirements.txt"
        argv.remove("--generate-hashes")
        argv += ["--annotation-style", "line"]
        env = {**(resolver_env(profile) or os.environ), **uv_index_env(profile)}
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=env)
        if done.returncode != 0:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            return Resolved(False, {}, " ".join(lines[-3:]).replace(tmp, "…"))
        found, needs = parse_compiled(out.read_text())
    extra = sorted(set(found) - set(versions))
    if extra:
        return Resolved(False, needs, f"it also needs {', '.join(extra)}")
    return Resolved(True, needs)


def parse_compiled(text: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """`name==version  # via a, b, -r x` lines → versions and who needs each."""
    from packaging.utils import canonicalize_name

    versions: dict[str, str] = {}
    needs: dict[str, set[str]] = {}
    for line in text.splitlines():
        pin, _, via = line.partition("# via")
        name, sep, version = pin.strip().partition("==")
        if not sep:
            continue
        name = canonicalize_name(name)
        versions[name] = version.strip()
        parents = {canonicalize_name(p.strip()) for p in via.split(",") if p.strip()}
        needs[name] = {p for p in parents if not p.startswith("-")}
    return versions, needs


# -- the mixed lock ------------------------------------------------------------------------
def package_blocks(text: str) -> tuple[str, dict[str, str], str]:
    """A lock's text cut in three: before its first package, each `[[packages]]` block by
    name, and from its `[tool` tables on."""
    from packaging.utils import canonicalize_name

    head: list[str] = []
    tail: list[str] = []
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines(keepends=True):
        if line.strip() == "[[packages]]":
            current = [line]
            blocks[f"#{len(blocks)}"] = current
        elif line.startswith("[tool") or tail:
            tail.append(line)
        elif current is not None:
            current.append(line)
        else:
            head.append(line)
    named: dict[str, str] = {}
    for lines in blocks.values():
        name = next(
            (ln.split("=", 1)[1].strip().strip('"') for ln in lines if ln.startswith("name")), ""
        )
        named[str(canonicalize_name(name))] = "".join(lines).rstrip("\n") + "\n\n"
    return "".join(head), named, "".join(tail)


def mixed_text(good: Lock, bad: Lock, from_bad: frozenset[str]) -> str:
    """GOOD's lock with the packages of `from_bad` as BAD's has them (absent there: none)."""
    head, good_blocks, tail = package_blocks(good.install_text())
    _, bad_blocks, _ = package_blocks(bad.install_text())
    blocks = {n: b for n, b in good_blocks.items() if n not in from_bad}
    blocks.update({n: bad_blocks[n] for n in from_bad if n in bad_blocks})
    return head + "".join(blocks[n] for n in sorted(blocks)) + tail


# -- the lab -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measuring:
    """How a run's result is read: its exit status, or the metric `name`."""

    metric: str | None
    argv: list[str]


class BisectLab:
    """Builds and runs probes on the profile's target; restores it in `close`."""

    def __init__(
        self,
        ctx: Context,
        good: End,
        bad: End,
        differences: list[Difference],
        measuring: Measuring,
        work: Path,
        progress: Callable[[str], None],
    ) -> None:
        self.ctx, self.good, self.bad = ctx, good, bad
        self.differences = differences
        self.measuring = measuring
        self.work = work
        self.progress = progress
        self.good_versions, self.bad_versions = good.lock.versions(), bad.lock.versions()
        state = gather_state(ctx, Probe(verify=False))
        if state.current is None:
            raise UsageError(
                "nothing applied yet: bisect returns the target to its active generation",
                hint=f"run `envlock apply {ctx.profile.path}` first",
            )
        self.original = state.current
        self.original_why = state.hold.why if state.hold is not None else "apply"
        self.existing = {g.name for g in state.generations}
        self.active: str | None = state.current
        self.generations: dict[tuple[tuple[str, str], ...], tuple[str, bool]] = {}
        self.locks: dict[str, str] = {}  # generation → its lock's path in `work`
        self.attempted: set[str] = set()  # the lock ids of every probe converge was given

    # Lab protocol
    def prepare(self, chosen: frozenset[int]) -> str | None:
        key = self.key(chosen)
        if key in self.generations:
            return None
        versions = dict(key)
        if versions not in (self.good_versions, self.bad_versions):
            resolved = resolve_pins(self.ctx.profile, versions)
            if not resolved.ok:
                return f"does not resolve: {resolved.why}"
        self.generations[key] = self.build(recipe(self.differences, chosen))
        return None

    def built(self, chosen: frozenset[int]) -> tuple[str | None, bool]:
        return self.generations.get(self.key(chosen), (None, False))

    def measure(self, chosen: frozenset[int]) -> float:
        name, _ = self.generations[self.key(chosen)]
        self.switch(name)
        return self.run(recipe(self.differences, chosen))

    # the steps
    def key(self, chosen: frozenset[int]) -> tuple[tuple[str, str], ...]:
        made = recipe(self.differences, chosen)
        return tuple(pins(self.good_versions, self.bad_versions, made.bad_packages).items())

    def build(self, made: Recipe) -> tuple[str, bool]:
        """A held generation of the probe's lock (converge reuses one that exists)."""
        text = mixed_text(self.good.lock, self.bad.lock, made.bad_packages)
        path = self.work / f"pylock.probe-{len(self.locks) + 1}.toml"
        write_atomic(path, text.encode())
        policy = snapshot_policy()
        doc, _ = lock_data(text, str(path), policy)
        from envlock.runs.snapshot_schema import check_sources

        check_sources(doc, find_links_for(self.ctx.profile), str(path))
        lock = parse_lock(path, text, policy)
        probe_ctx = Context(self.ctx.profile, lock, self.ctx.transport)
        self.attempted.add(lock.short_hash)  # before: an interrupted build is ours too
        done = converge(probe_ctx, held=True)
        name = str(done.current)
        self.active = name
        self.locks[name] = str(path)
        built = any(a.kind == "build" for a in done.plan.actions) and name not in self.existing
        return name, built

    def switch(self, name: str, why: str = "snapshot") -> None:
        if self.active == name and why == "snapshot":
            return
        action = Action(
            "switch",
            f"switch current to generation {name} (bisect)",
            {
                "name": name,
                "why": why,
            },
        )
        execute(self.ctx, Plan((action,)))
        self.active = name

    def run(self, made: Recipe) -> float:
        """CMD once, as `envlock run` starts it, with the probe's variables and cache."""
        _container, state, drifts = check_all(self.ctx, Probe())
        judged = verdict(self.ctx, state, drifts, allow_drift=False)
        if judged.refusal is not None or state is None:
            why, shown, _ = judged.refusal or ("no state", [], False)
            items = "; ".join(f"{d.kind} {d.subject}" for d in shown[:5])
            raise OperationError(f"bisect: `run` refuses generation {self.active}: {why}: {items}")
        if self.ctx.profile.target.remote:
            return self.run_remote(made, state)
        env = command_environment(self.ctx, state, os.environ)
        with tempfile.TemporaryDirectory(prefix="run-", dir=self.work) as scratch:
            (Path(scratch) / "out").mkdir()
            env.update(self.variables(made, scratch))
            for name in self.unset(made):
                env.pop(name, None)
            done = subprocess.run(self.measuring.argv, env=env, capture_output=True, text=True)
            return self.result(done.returncode, done.stdout, done.stderr, Path(scratch) / "out")

    def run_remote(self, made: Recipe, state: State) -> float:
        """On a remote target: through run's launcher, its output read back; the scratch
        directory (and a snapshot written there) on the target."""
        import secrets

        transport, root = self.ctx.transport, self.ctx.profile.target.root
        env = command_environment(self.ctx, state, passed_env(self.ctx, ()))
        scratch = f"{root}/run/bisect-{secrets.token_hex(8)}"
        transport.run(["mkdir", "-p", f"{scratch}/out"])
        try:
            env.update(self.variables(made, scratch))
            unset = tuple(self.unset(made))
            for name in unset:
                env.pop(name, None)
            gen = generation_dir(self.ctx.profile, state)
            spec = remote_spec(
                env, f"{gen}/bin", (*SCRUBBED, *unset), self.ctx.profile.env.get("PATH")
            )
            code, out, err = run_remote_captured(transport, root, self.measuring.argv, spec)
            local = Path(tempfile.mkdtemp(prefix="out-", dir=self.work))
            if (
                self.measuring.metric is not None
                and metric_line(out, self.measuring.metric) is None
            ):
                found = transport.run(["cat", f"{scratch}/out/{SNAPSHOT_FILE}"])
                if found.ok:
                    write_atomic(local / SNAPSHOT_FILE, found.stdout)
            return self.result(code, out, err, local)
        finally:
            transport.run(["rm", "-rf", scratch])

    def variables(self, made: Recipe, scratch: str) -> dict[str, str]:
        found: dict[str, str] = {"ENVLOCK_BISECT_DIR": f"{scratch}/out"}
        if made.cold_cache:
            found["TORCHINDUCTOR_CACHE_DIR"] = f"{scratch}/cold/inductor"
            found["TRITON_CACHE_DIR"] = f"{scratch}/cold/triton"
        for name, value in made.env:
            if value is not None:
                found[name] = value
        return found

    def result(self, code: int, stdout: str, stderr: str, out: Path) -> float:
        if code in NOT_RUN or code < 0 or code >= KILLED:
            tail = (stderr or "").strip().splitlines()[-3:]
            raise OperationError(
                f"bisect: CMD did not run to its end (exit {code}): " + " ".join(tail),
                hint="check the command with `envlock run PROFILE -- CMD` first",
            )
        if self.measuring.metric is None:
            return float(code)
        value = metric_of(stdout, self.measuring.metric, out)
        if value is None:
            raise OperationError(
                f"bisect: CMD (exit {code}) printed no JSON line with {self.measuring.metric!r}"
                " and wrote no snapshot metric of that name into $ENVLOCK_BISECT_DIR",
                hint='print e.g. {"' + self.measuring.metric + '": 123.4} as its last JSON line',
            )
        return value

    def unset(self, made: Recipe) -> list[str]:
        return [name for name, value in made.env if value is None]

    def close(self, keep: bool) -> list[str]:
        """Back to the generation active before (its hold as it was), SIGINT held off
        meanwhile; the probes this bisect built removed unless `keep`. Returns them."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            self.switch(self.original, self.original_why)
            ours = self.ours()
            if ours and not keep:
                action = Action("cleanup", f"remove {len(ours)} bisect probe(s)", {"names": ours})
                execute(self.ctx, Plan((action,)))
            return ours
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def ours(self) -> list[str]:
        """The generations this bisect made, as the target has them now: a probe whose
        build was interrupted (its name never came back) included."""
        state = gather_state(self.ctx, Probe(verify=False))
        return sorted(
            g.name
            for g in state.generations
            if g.name not in self.existing
            and g.name != self.original
            and g.lock_hash in self.attempted
        )


def metric_of(stdout: str, name: str, out: Path) -> float | None:
    """The last JSON line of stdout holding `name`, else `envlock.snapshot(metrics=…)`'s file
    in $ENVLOCK_BISECT_DIR (`out`: here, or its copy from the target)."""
    found = metric_line(stdout, name)
    if found is not None or not os.path.lexists(out / SNAPSHOT_FILE):
        return found
    from envlock.runs.snapshot_file import load_snapshot

    try:
        metrics = load_snapshot(out).get("metrics") or {}
    except EnvlockError:
        return None
    return float(metrics[name]) if is_number(metrics.get(name)) else None


def metric_line(stdout: str, name: str) -> float | None:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and is_number(data.get(name)):
            return float(data[name])
    return None


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def clean_work(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
