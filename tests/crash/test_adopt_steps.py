"""kill -9 at every step of `apply --adopt`: the user's venv is always where it was, intact,
or a complete generation 0, and the next apply never deletes it.

The steps are the real command's own: one `envlock apply --adopt` is traced with strace,
and each syscall of the agent's adoption that makes a directory, writes a file (its fsync),
moves or links a name is a kill point. For each, a fresh venv is adopted again with strace
delivering SIGKILL to the agent as it enters that syscall (strace's `inject=…:signal=KILL:
when=N`, counted per process and syscall), so the crash lands at that step and no other:
the trace of the killed run is read back to prove where it landed. After each crash the
venv is at its path and unchanged, or generation 0 is complete (its manifest and
generation.json beside files unchanged); then the next apply, as a user would run it,
succeeds and generation 0 still holds the venv, byte for byte."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.cli.test_adopt import tree_digest
from tests.conftest import Envlock

# The syscalls that change names or make bytes durable; openat is left out (every import
# opens files): the fsync after a temp file's write is its kill point.
STEPS = ("mkdir", "mkdirat", "rename", "renameat", "renameat2", "symlink", "symlinkat")
STEPS += ("link", "linkat", "unlink", "unlinkat", "fsync", "fdatasync")
CALL = re.compile(r"^(\w+)\((.*)\)\s+= (-?\d+)")


@dataclass(frozen=True)
class Step:
    """The `nth` call of `syscall` in the agent's process, and what it said."""

    syscall: str
    nth: int
    text: str

    def __str__(self) -> str:
        return f"{self.syscall} #{self.nth}: {self.text[:160]}"


def calls(log: Path) -> list[tuple[str, str, int]]:
    """(syscall, arguments, return value) of one process's log, in its order."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        match = CALL.match(line)
        if match:
            out.append((match.group(1), match.group(2), int(match.group(3))))
    return out


def agent_log(prefix: Path, venv: Path) -> Path:
    """The log of the process that adopted: the one that made the venv's `.envlock/`."""
    made = f'mkdir("{venv}/.envlock"'
    (log,) = [p for p in prefix.parent.glob(prefix.name + ".*") if made in p.read_text()]
    return log


def adoption_steps(log: Path) -> list[Step]:
    """Every successful call of the adoption, numbered per syscall as strace counts them,
    up to the build of generation 1 after it (its last, the history's fsync, sees the
    adoption's every name in place)."""
    seen: dict[str, int] = {}
    steps = []
    for syscall, args, ret in calls(log):
        if "/generations/1-" in args:
            break
        seen[syscall] = seen.get(syscall, 0) + 1
        if ret == 0:
            steps.append(Step(syscall, seen[syscall], args))
    return steps


# The parts of a path that differ from run to run: a temp name's and generation 0's.
RANDOM = re.compile(r"\.[0-9a-f]{12}\.tmp|/0-[0-9a-f]{12}")


def same_call(one: str, other: str) -> bool:
    return RANDOM.sub("~", one) == RANDOM.sub("~", other)


def assert_landed(prefix: Path, step: Step) -> None:
    """One process was killed, at the step's call, after the calls before it: the agent."""
    killed = [p for p in prefix.parent.glob(prefix.name + ".*") if KILLED in p.read_text()]
    assert len(killed) == 1, f"{step}: {len(killed)} processes killed"
    lines = killed[0].read_text().splitlines()
    landed = lines[lines.index(KILLED) - 1]
    assert same_call(
        landed.partition(" <unfinished")[0].rstrip(" =?"), f"{step.syscall}({step.text})"
    ), (str(step), landed)
    assert len(calls(killed[0])) == step.nth - 1, (str(step), lines)


KILLED = "+++ killed by SIGKILL +++"


def synced_dirs(steps: list[Step]) -> list[str]:
    """The descriptors (`N</path>`) the steps fsync."""
    return [s.text for s in steps if s.syscall == "fsync"]


class Scene:
    """A profile locked once; each round starts from a fresh venv at its path, no root."""

    def __init__(self, tmp: Path, wheelhouse: Path, envlock: Envlock) -> None:
        tmp.mkdir()
        self.tmp, self.envlock = tmp, envlock
        self.venv, self.root = tmp / "venv", tmp / "root"
        self.profile = tmp / "c.toml"
        flags = ("--root", self.root, "--venv", self.venv, "--find-links", wheelhouse)
        assert envlock("init", self.profile, *flags, "--offline").returncode == 0
        assert envlock("lock", self.profile).returncode == 0

    def fresh(self) -> str:
        for path in (self.root, self.venv):
            if path.is_symlink():
                path.unlink()
            elif path.exists():
                shutil.rmtree(path)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", self.venv], check=True)
        (self.venv / "lib" / "mine.txt").write_text("the user's own file\n")
        return tree_digest(self.venv)

    def traced(self, strace: str, prefix: Path, *options: str) -> int:
        argv = [strace, "-f", "-ff", "-qq", "-y", "-s", "4096", *options, "-o", str(prefix)]
        argv += [sys.executable, "-m", "envlock", "apply", "--adopt", "-y", str(self.profile)]
        return subprocess.run(argv, capture_output=True, text=True).returncode

    def generation_0(self) -> Path | None:
        found = sorted((self.root / "generations").glob("0-*"))
        assert len(found) <= 1, found
        return found[0] if found else None


def complete(gen: Path, venv: Path, before: str) -> bool:
    """A complete generation 0: manifest and generation.json written, the files unchanged."""
    meta = gen / ".envlock" / "generation.json"
    return (
        meta.is_file()
        and (gen / ".envlock" / "manifest.json").is_file()
        and json.loads(meta.read_text()).get("adopted_from") == str(venv)
        and tree_digest(gen) == before
    )


def where_the_venv_is(scene: Scene, before: str) -> str:
    """Where the user's venv is now: at its path, or generation 0. Fails if neither holds it."""
    venv, gen = scene.venv, scene.generation_0()
    if venv.is_dir() and not venv.is_symlink():
        assert tree_digest(venv) == before, "the venv at its path changed"
        assert gen is None or not complete(gen, venv, before), "the venv is in two places"
        return "at its path"
    assert gen is not None, f"the venv is gone: nothing at {venv}, no generation 0"
    assert complete(gen, venv, before), (
        f"{gen.name} holds the venv but is not a complete generation 0 "
        f"({sorted(p.name for p in (gen / '.envlock').glob('*'))}), and nothing is at {venv}"
    )
    return "generation 0"


def test_a_kill_at_every_step_of_adopt_leaves_the_venv_in_place_or_a_complete_generation_0(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock, strace: str
) -> None:
    scene = Scene(tmp_path / "s", wheelhouse, envlock)
    logs = tmp_path / "strace"
    logs.mkdir()
    scene.fresh()  # a first adoption untraced: the agent's compiled code is cached after it
    first = envlock("apply", "--adopt", "-y", scene.profile)
    assert first.returncode == 0, first.stderr
    scene.fresh()
    assert scene.traced(strace, logs / "whole", "-e", f"trace={','.join(STEPS)}") == 0
    steps = adoption_steps(agent_log(logs / "whole", scene.venv))
    # The trace saw the adoption's every kind of step (else it proves nothing).
    texts = [f"{s.syscall}({s.text})" for s in steps]
    for wanted in ("manifest.json", "generation.json", f'"{scene.venv}", ', "/root/current"):
        assert any(wanted in t and t.startswith("rename") for t in texts), (wanted, texts)
    assert any(t.startswith("symlink") for t in texts), texts
    # The move made durable before the links: an fsync of the venv's parent and of
    # generations/ right after it (after a power cut, neither name comes back as it was).
    moved = next(i for i, t in enumerate(texts) if t.startswith(f'rename("{scene.venv}", '))
    synced = texts[moved + 1 : moved + 3]
    assert synced == [f"fsync({n})" for n in synced_dirs(steps[moved + 1 : moved + 3])], texts
    assert [d.rsplit("<", 1)[1] for d in synced_dirs(steps[moved + 1 : moved + 3])] == [
        f"{scene.venv.parent}>",
        f"{scene.root}/generations>",
    ], synced

    outcomes = []
    for number, step in enumerate(steps):
        before = scene.fresh()
        prefix = logs / f"{number}"
        inject = f"inject={step.syscall}:signal=KILL:when={step.nth}"
        code = scene.traced(strace, prefix, "-e", f"trace={step.syscall}", "-e", inject)
        assert code != 0, f"{step}: the apply ran through, the kill never landed"
        assert_landed(prefix, step)
        try:
            outcomes.append(where_the_venv_is(scene, before))
            again = ["apply", "-y", str(scene.profile)]
            if not scene.venv.is_symlink():
                again.insert(1, "--adopt")  # as the user runs it again
            done = envlock(*again)
            assert done.returncode == 0, done.stdout + done.stderr
            gen = scene.generation_0()
            assert gen is not None and complete(gen, scene.venv, before), "generation 0 lost"
            assert os.readlink(scene.venv) == str(scene.root / "current")
        except AssertionError as exc:
            raise AssertionError(f"killed at {step}: {exc}") from exc
    assert {"at its path", "generation 0"} == set(outcomes), outcomes
