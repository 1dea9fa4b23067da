"""A model-based test of generations (hypothesis `RuleBasedStateMachine`) on a real local
root with the suite's small wheels: apply, add, remove, rollback, rollback --to, gc,
pollution, kill -9 during an apply, two applies at once and profile edits, in any order,
with the issue's invariants checked after every step against a small model.

Bounded (a few examples of a few steps: about three minutes on two cores); the number of
states explored is printed. Sequences it ever finds failing are kept below as explicit
regression tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from envlock.lock.read import read_lock
from tests.conftest import run_envlock
from tests.projects import write_seed_project
from tests.support import uv_install

EXAMPLES, STEPS = 4, 8
VERSIONS = ("1.0", "0.9")
EXPLORED: list[int] = []  # one entry per state checked, across examples
RULES: Counter[str] = Counter()  # how often each rule ran


def envlock(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_envlock(*args)


class Generations(RuleBasedStateMachine):
    """The model: the profile's packages, whether a converge or a rollback came last, and
    whether the active generation was polluted since."""

    wheelhouse: Path

    def __init__(self) -> None:
        super().__init__()
        self.base = Path(tempfile.mkdtemp(prefix="envlock-model-"))
        self.tinydep, self.extra = "1.0", False
        self.profile = write_seed_project(self.base / "proj", self.wheelhouse)
        self.project = self.profile.parent
        self.locks: dict[str, str] = {}  # profile text -> lock text: each resolved once
        self.dirty: set[str] = set()  # generations polluted and not repaired since
        self.held = False
        self.relock()
        self.converge()

    def teardown(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)

    # -- the world -----------------------------------------------------------------------
    def relock(self) -> None:
        packages = ["trainutil", f"tinydep=={self.tinydep}"] + (
            ["sgl-kernel"] if self.extra else []
        )
        text = self.profile.read_text()
        start = text.index("packages = [")
        end = text.index("]", start) + 1
        self.profile.write_text(text[:start] + f"packages = {json.dumps(packages)}" + text[end:])
        key = self.profile.read_text()
        lock_path = self.project / "pylock.seed.toml"
        if key in self.locks:
            lock_path.write_text(self.locks[key])
            return
        locked = envlock("lock", self.profile)
        assert locked.returncode == 0, locked.stderr
        self.locks[key] = lock_path.read_text()

    def converge(self, *extra: str) -> subprocess.CompletedProcess[str]:
        applied = envlock("apply", "-y", *extra, self.profile)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        self.converged()
        return applied

    def converged(self) -> None:
        """After any converge: no hold, and the active generation is as built (a switch
        re-checks the generation it switched to and repairs it)."""
        self.held = False
        self.dirty.discard(self.current())

    def current(self) -> str:
        return os.readlink(self.project / "root" / "current").rsplit("/", 1)[-1]

    def complete(self) -> dict[str, dict[str, object]]:
        found = {}
        for gen in (self.project / "root" / "generations").iterdir():
            meta = gen / ".envlock" / "generation.json"
            if meta.exists():
                found[gen.name] = json.loads(meta.read_text())
        return found

    # -- rules ---------------------------------------------------------------------------
    @rule()
    def apply(self) -> None:
        RULES["apply"] += 1
        self.converge()

    @rule(version=st.sampled_from(VERSIONS))
    def edit_profile_and_lock(self, version: str) -> None:
        RULES["edit_profile_and_lock"] += 1
        self.tinydep = version
        self.relock()

    @precondition(lambda self: not self.extra)
    @rule()
    def add(self) -> None:
        RULES["add"] += 1
        added = envlock("add", "-y", self.profile, "sgl-kernel")
        assert added.returncode == 0, added.stdout + added.stderr
        self.extra = True
        self.converged()
        self.locks[self.profile.read_text()] = (self.project / "pylock.seed.toml").read_text()

    @precondition(lambda self: self.extra)
    @rule()
    def remove(self) -> None:
        RULES["remove"] += 1
        removed = envlock("remove", "-y", self.profile, "sgl-kernel")
        assert removed.returncode == 0, removed.stdout + removed.stderr
        self.extra = False
        self.converged()
        self.locks[self.profile.read_text()] = (self.project / "pylock.seed.toml").read_text()

    @rule(to=st.booleans())
    def rollback(self, to: bool) -> None:
        RULES["rollback"] += 1
        complete = sorted(self.complete(), key=lambda name: int(name.split("-")[0]))
        others = [name for name in complete if name != self.current()]
        if not others:
            return
        args = ["--to", others[0].split("-")[0]] if to else []
        rolled = envlock("rollback", *args, self.profile)
        if rolled.returncode == 2 and "no previous generation" in rolled.stderr:
            return
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        if "already active" not in rolled.stdout:
            self.held = True  # a rollback does not repair: a polluted generation stays so

    @rule()
    def gc(self) -> None:
        RULES["gc"] += 1
        done = envlock("gc", "-y", "--keep", "1", self.profile)
        assert done.returncode == 0, done.stdout + done.stderr

    @rule()
    def pollute(self) -> None:
        RULES["pollute"] += 1
        uv_install(self.project / "venv" / "bin" / "python", [self.wheelhouse], "flashinfer-python")
        self.dirty.add(self.current())

    @rule()
    def kill_an_apply_then_apply(self) -> None:
        RULES["kill_an_apply_then_apply"] += 1
        self.tinydep = "0.9" if self.tinydep == "1.0" else "1.0"
        self.relock()
        proc = subprocess.Popen(
            [sys.executable, "-m", "envlock", "apply", "-y", str(self.profile)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert proc.stderr is not None
        for line in proc.stderr:  # killed mid-way: once it has started to change the root
            if "creating venv" in line or "switch current" in line or "re-sync" in line:
                break
        with contextlib.suppress(ProcessLookupError):  # it may have finished first
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        self.converge()

    @rule()
    def two_applies_at_once(self) -> None:
        RULES["two_applies_at_once"] += 1
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "envlock", "apply", "-y", str(self.profile)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outputs = [proc.communicate(timeout=300) for proc in procs]
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, out + err
        said = sorted("nothing to do" in out for out, _ in outputs)
        assert said in ([False, True], [True, True]), outputs  # never two that act
        self.converged()

    # -- invariants ----------------------------------------------------------------------
    @invariant()
    def the_root_means_what_the_model_says(self) -> None:
        EXPLORED.append(1)
        root = self.project / "root"
        current = os.readlink(root / "current").rsplit("/", 1)[-1]
        complete = self.complete()
        assert current in complete, (current, sorted(complete))
        numbers = [name.split("-")[0] for name in os.listdir(root / "generations")]
        assert len(numbers) == len(set(numbers)), numbers
        hashes = [name.split("-")[1] for name in complete]
        assert len(hashes) == len(set(hashes)), sorted(complete)  # no duplicate builds
        check = envlock("check", "--json", self.profile)
        verdict = json.loads(check.stdout)
        assert (verdict["hold"] is not None) == self.held, (verdict["hold"], self.held)
        locked = read_lock(self.project / "pylock.seed.toml").short_hash
        matches = current.split("-")[1] == locked
        polluted = current in self.dirty
        clean = not polluted and (self.held or matches)
        assert (check.returncode == 0) == clean, (check.stdout, self.held, polluted)
        ran = envlock("run", self.profile, "--", "true")
        assert (ran.returncode == 0) == clean, ran.stderr


def test_generations_state_machine(wheelhouse: Path) -> None:
    Generations.wheelhouse = wheelhouse
    EXPLORED.clear()
    RULES.clear()
    machine = Generations.TestCase
    machine.settings = settings(
        max_examples=EXAMPLES,
        stateful_step_count=STEPS,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    machine().runTest()
    print(f"model-based test: {len(EXPLORED)} states checked ({EXAMPLES} examples); rules run:")
    print("  " + ", ".join(f"{name} {count}" for name, count in sorted(RULES.items())))
    assert len(EXPLORED) >= EXAMPLES


# -- sequences the machine found failing (on the code before the converge decided under the
# root's lock), kept as regression tests ------------------------------------------------


def test_two_applies_after_a_rollback_switch_back_once(wheelhouse: Path) -> None:
    Generations.wheelhouse = wheelhouse
    state = Generations()
    try:
        state.the_root_means_what_the_model_says()
        state.add()
        state.the_root_means_what_the_model_says()
        state.apply()
        state.the_root_means_what_the_model_says()
        state.rollback(to=False)
        state.the_root_means_what_the_model_says()
        state.two_applies_at_once()
        state.the_root_means_what_the_model_says()
    finally:
        state.teardown()
