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

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envlock.base.atomic import write_atomic
from envlock.commands.run import passed_env, verdict
from envlock.converge.converge import converge
from envlock.errors import OperationError, UsageError
from envlock.lock.links import find_links_for
from envlock.lock.policy import snapshot_policy
from envlock.lock.read import parse_lock
from envlock.lock.schema import lock_data
from envlock.reconcile.context import Context, Probe, check_all, gather_state
from envlock.reconcile.execute import execute
from envlock.reconcile.plan import Action, Plan
from envlock.reconcile.state import State
from envlock.runs.bisect import Difference, Recipe, pins, recipe
from envlock.runs.bisect_inputs import (
    SNAPSHOT_FILE,
    End,
    metric_line,
    metric_of,
    mixed_text,
    resolve_pins,
)
from envlock.runs.environment import SCRUBBED, command_environment, generation_dir
from envlock.runs.launch import KILLED, remote_spec, run_remote_captured

# Statuses that say CMD did not run at all (a shell's "cannot execute", "not found").
NOT_RUN = (126, 127)


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


def clean_work(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
