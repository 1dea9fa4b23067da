"""Every name that records state is durable: a syscall trace of apply, rollback, gc and add.

LazyFS makes names durable at once, so a power-cut test cannot see a rename (or an unlink)
that was never made durable: after a real power cut on ext4 such a name can come back as
it was (`current` pointing at the previous generation, `generation.json` missing, a hold
back). This test traces the real commands with strace and asserts that each rename, link
or unlink that records state is followed, in the same process and before its next such
step, by an fsync of the directory that holds the name."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.projects import write_seed_project

SYSCALLS = "rename,renameat,renameat2,link,linkat,unlink,unlinkat,fsync,fdatasync,syncfs"
CALL = re.compile(r"^(\w+)\((.*)\)\s+= (-?\d+)")
# An argument as strace -y prints it: a quoted path, or a descriptor with its path.
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"|(?:\d+|AT_FDCWD)<([^>]*)>|AT_FDCWD')


@dataclass
class Step:
    """A state-recording name change, waiting for the fsync of its directory."""

    call: str
    path: str
    synced: bool = False


@dataclass
class Trace:
    steps: list[Step] = field(default_factory=list)
    unsynced: list[str] = field(default_factory=list)


def args_of(text: str) -> list[str | None]:
    """The arguments of one call: paths, descriptors' paths (None: AT_FDCWD unresolved)."""
    out: list[str | None] = []
    for match in ARG.finditer(text):
        out.append(match.group(1) if match.group(1) is not None else match.group(2))
    return out


def joined(directory: str | None, name: str | None) -> str | None:
    if name is None:
        return None
    if name.startswith("/") or directory is None:
        return name
    return os.path.join(directory, name)


def changed_path(call: str, text: str) -> str | None:
    """The name a rename, link or unlink recorded (its destination), or None."""
    args = args_of(text)
    if call in ("rename", "link"):
        return args[1] if len(args) > 1 else None
    if call in ("renameat", "renameat2", "linkat"):
        return joined(args[2], args[3]) if len(args) > 3 else None
    if call == "unlink":
        return args[0] if args else None
    if call == "unlinkat":
        return joined(args[0], args[1]) if len(args) > 1 else None
    return None


# A profile's candidate that `add` locks before it replaces the profile (never state).
SCRATCH = re.compile(r"/\.[^/]*\.envlock-candidate-\d+\.toml$")


def records_state(path: str, project: Path) -> bool:
    """Whether a name is envlock's state: inside the project (profile, lock, root), not a
    temp file, not inside a generation's files (made durable as a whole, before its
    generation.json) nor inside one being removed (gone already: it was renamed away)."""
    if not path.startswith(str(project) + "/"):
        return False
    rel = Path(path).relative_to(project).parts
    if (
        path.endswith(".tmp")
        or SCRATCH.search(path)
        or any(part.startswith(".trash-") for part in rel[:-1])
    ):
        return False
    if "generations" in rel:
        inner = rel[rel.index("generations") + 1 :]
        return len(inner) == 1 or (len(inner) == 3 and inner[1] == ".envlock")
    return True


def read_trace(prefix: Path, project: Path) -> Trace:
    """Each process's calls (strace -ff: one file a process, in its order)."""
    trace = Trace()
    for log in sorted(prefix.parent.glob(prefix.name + ".*")):
        pending: list[Step] = []
        for line in log.read_text(errors="replace").splitlines():
            match = CALL.match(line)
            if not match or match.group(3) != "0":
                continue
            call, text = match.group(1), match.group(2)
            if call in ("fsync", "fdatasync"):
                synced = (args_of(text) or [None])[0]
                for step in pending:
                    step.synced = step.synced or synced == os.path.dirname(step.path)
                continue
            path = changed_path(call, text)
            if path is None or not records_state(path, project):
                continue
            trace.unsynced += [f"{s.call} {s.path}" for s in pending if not s.synced]
            pending = [Step(call, path)]
            trace.steps.append(pending[0])
        trace.unsynced += [f"{s.call} {s.path} (at the end)" for s in pending if not s.synced]
    return trace


def traced(strace: str, prefix: Path, *args: str | Path) -> None:
    options = ["-f", "-ff", "-qq", "-y", "-s", "4096", "-e", f"trace={SYSCALLS}"]
    done = subprocess.run(
        [strace, *options, "-o", str(prefix), sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_state_rename_and_unlink_is_followed_by_an_fsync_of_its_directory(
    tmp_path: Path, wheelhouse: Path, strace: str
) -> None:
    project = tmp_path / "proj"
    profile = write_seed_project(project, wheelhouse)
    logs = tmp_path / "strace"
    logs.mkdir()
    steps = [
        ("lock", [profile]),
        ("apply", ["-y", profile]),
        ("relock", []),
        ("apply", ["-y", profile]),
        ("add", ["-y", profile, "flashinfer-python"]),
        ("apply", ["-y", profile]),
        ("rollback", [profile]),
        ("apply", ["-y", profile]),
        ("gc", ["-y", "--keep", "1", profile]),
    ]
    seen: list[str] = []
    unsynced: list[str] = []
    for number, (command, args) in enumerate(steps):
        if command == "relock":
            profile.write_text(profile.read_text().replace('"tinydep==1.0"', '"tinydep==0.9"'))
            command, args = "lock", [profile]
        prefix = logs / f"{number}-{command}"
        traced(strace, prefix, command, *args)
        trace = read_trace(prefix, project)
        seen += [f"{command}: {s.call} {s.path}" for s in trace.steps]
        unsynced += [f"{command}: {step}" for step in trace.unsynced]
    assert not unsynced, "not followed by an fsync of the directory:\n" + "\n".join(unsynced)
    # The trace saw what it is about (else it proves nothing): the switch, generation.json,
    # the hold's end, a generation renamed away by gc, the profile and lock of `add`.
    for wanted in (
        r"apply: rename \S+/root/current$",
        r"apply: rename \S+/generations/[^/]+/\.envlock/generation\.json$",
        r"rollback: rename \S+/root/hold\.json$",
        r"apply: unlink \S+/root/hold\.json$",
        r"gc: rename \S+/generations/\.trash-1-",
        r"add: rename \S+/proj/seed\.toml$",
    ):
        assert any(re.search(wanted, line) for line in seen), (wanted, seen)
