"""One command across a fleet: every selected container of a Proxmox cluster, or of one or
more Docker engines (selected by label).

A fleet is a list of member Contexts (the profile and its lock, each with a Target of its
own: a concrete vmid, node and ssh host). Each member runs the single-target code path of
the command (a `work` function taking a Context and returning a MemberResult) in a thread
pool of `--jobs` workers; one ssh master per node is opened before the node's first member
runs, and shared by the node's containers. Then one summary: the fleet's answer in a line,
and a table with the members that differ first.

Ctrl-C stops scheduling: members in flight finish (the agent on a target runs under its
root's lock and either finishes or leaves the root as it was), the rest are "not started".
Their ssh clients run in sessions of their own, so the Ctrl-C a terminal sends to its whole
foreground process group does not cut them. A second Ctrl-C stops waiting for them: their
local ssh clients end, their agents finish on their own.

`--json` prints one document (kind "fleet" in envlock.schema.DOCUMENTS): {"schema",
"members": [one object per member: member (node/vmid, a Docker fleet's engine/name), vmid
(null for Docker), node (a Docker fleet's engine), name, status, exit, result, generation
(its name), generation_number, generation_lock, held, drift_count, note, cause (a failure's, in a
line: errors.cause_of), seconds, and the command's own fields], "fleet": {profile, lock,
members, summary, exit, interrupted}}.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, cast

from envlock import ui
from envlock.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EnvlockError,
    OperationError,
    UsageError,
    cause_of,
)
from envlock.reconcile.context import Context, is_fleet  # noqa: F401 (apply's import)
from envlock.targets.base import Multiplexed, NotRunning, Sessions
from envlock.targets.members import Member, restrict

if TYPE_CHECKING:
    # Imported where a summary is drawn: every command imports this module for
    # MemberResult, few draw a fleet's table.
    from rich.table import Table

Progress = Callable[[str], None]
# The exit codes from best to worst: a fleet exits with its worst member's.
SEVERITY = (0, 1, 2, 3)


@dataclass
class MemberResult:
    """What one member's command found or did, for the summary and --json."""

    code: int
    result: str  # in words: clean, drift, applied, in sync, stopped, failed, not started, …
    generation: int | None = None
    lock: str = ""  # the active generation's lock
    hold: bool = False  # a rollback holds the root on another lock
    drift: int | None = None
    note: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


Work = Callable[[Context, Progress], MemberResult]


def member_context(ctx: Context, member: Member, sessions: Sessions | None = None) -> Context:
    """The fleet's context narrowed to one member: same profile and lock, its own target
    (its ssh clients in `sessions`, when given)."""
    target = ctx.profile.target
    settings = target.settings.member(member)
    profile = dataclasses.replace(
        ctx.profile, target=dataclasses.replace(target, settings=settings)
    )
    transport = profile.target.transport()
    if sessions is not None and isinstance(transport, Multiplexed):
        transport.use_sessions(sessions)
    return Context(profile, ctx.lock, transport, ctx.stale)


def members_of(ctx: Context, on: tuple[str, ...]) -> list[Member]:
    target = ctx.profile.target
    assert target.kind.members is not None, f"{target.type} lists no fleet's members"
    members = restrict(target.kind.members(target.settings), on)
    if not members:
        raise UsageError(
            "the fleet's selection matches no container",
            hint=target.kind.no_members_hint,
        )
    return members


def one_member(ctx: Context, on: tuple[str, ...], command: str) -> Context:
    """The context of the one member `--on` picks (commands that act on a single one)."""
    if not on:
        raise UsageError(
            f"`envlock {command}` acts on one container, and this profile names a fleet",
            hint="pick one with --on VMID (a Docker fleet: --on NAME); running across members "
            "is the scheduler's job",
        )
    members = members_of(ctx, on)
    if len(members) != 1:
        raise UsageError(
            f"--on picks {len(members)} members ({', '.join(m.label for m in members)}): "
            f"`envlock {command}` acts on exactly one",
            hint="pick one with --on VMID (a Docker fleet: --on NAME)",
        )
    return member_context(ctx, members[0])


class Fleet:
    """The members of one command, run with bounded concurrency."""

    def __init__(self, ctx: Context, members: list[Member], *, quiet: bool) -> None:
        self.ctx = ctx
        self.members = members
        self.quiet = quiet
        self.stop = threading.Event()
        self.fail_fast = False
        self.failed_first: Member | None = None  # what --fail-fast stopped after
        self.sessions = Sessions()
        self.results: dict[Member, MemberResult] = {}
        self.in_flight: dict[Member, float] = {}  # when each started
        self.finished: queue.SimpleQueue[Member | None] = queue.SimpleQueue()
        self.interrupts = 0
        self.node_locks = {m.node: threading.Lock() for m in members}
        self.node_ready: dict[str, EnvlockError | None] = {}

    def progress(self, member: Member) -> Progress:
        if self.quiet:
            return lambda line: None
        return lambda line: ui.info(f"{member.label}: {line.strip()}")

    def open_node(self, member: Member, mctx: Context) -> None:
        """One ssh master per node, up before its first member runs (the one a command
        before this left running, or a new one): the node's other members wait for it and
        share it (the ssh transport multiplexes per connection). A transport that shares
        no connection (not Multiplexed) has nothing to open; docker's opens nothing."""
        if not isinstance(mctx.transport, Multiplexed):
            return
        with self.node_locks[member.node]:
            if member.node not in self.node_ready:
                try:
                    cast(Multiplexed, mctx.transport).open_master()
                    self.node_ready[member.node] = None
                except EnvlockError as exc:
                    self.node_ready[member.node] = exc
        problem = self.node_ready[member.node]
        if problem is not None:
            raise problem

    def run_member(self, member: Member, work: Work, include_stopped: bool) -> MemberResult:
        if self.stop.is_set():
            return MemberResult(0, "not started", note="interrupted before it started")
        started = self.in_flight[member] = time.perf_counter()
        progress = self.progress(member)
        try:
            if member.error:
                raise OperationError(member.error)
            if not member.running and not include_stopped:
                raise NotRunning(f"container {member.key} is {member.status}")
            mctx = member_context(self.ctx, member, self.sessions)
            self.open_node(member, mctx)
            result = work(mctx, progress)
        except NotRunning as exc:
            result = MemberResult(EXIT_FAILED, "stopped", note=exc.message)
        except EnvlockError as exc:
            result = MemberResult(exc.exit_code, "failed", note=exc.message)
        except Exception as exc:  # one member's bug must not hide the others' results
            result = MemberResult(EXIT_FAILED, "failed", note=f"{type(exc).__name__}: {exc}")
        if self.fail_fast and result.code >= 2 and not self.stop.is_set():
            # Set before this worker takes the next member: none starts after a failure.
            self.failed_first = member
            self.stop.set()
        result.seconds = time.perf_counter() - started
        progress(f"{result.result}" + (f": {result.note}" if result.note else ""))
        return result

    def worker(self, todo: queue.SimpleQueue[Member], work: Work, include_stopped: bool) -> None:
        while True:
            try:
                member = todo.get_nowait()
            except queue.Empty:
                return
            try:
                result = self.run_member(member, work, include_stopped)
            except Exception as exc:  # the summary must come, whatever went wrong here
                result = MemberResult(EXIT_FAILED, "failed", note=f"{type(exc).__name__}: {exc}")
            self.results[member] = result
            self.in_flight.pop(member, None)
            self.finished.put(member)

    def run(
        self, work: Work, *, jobs: int, fail_fast: bool, include_stopped: bool
    ) -> tuple[dict[Member, MemberResult], bool]:
        """Every member's result, and whether an interrupt stopped the scheduling.

        The workers are daemon threads: after a second Ctrl-C, envlock stops waiting for
        the members in flight and may exit while their agents finish on their own."""
        if jobs < 1:
            raise UsageError(f"--jobs expects at least 1, found {jobs}")
        self.fail_fast = fail_fast
        todo: queue.SimpleQueue[Member] = queue.SimpleQueue()
        for member in self.members:
            todo.put(member)
        for n in range(min(jobs, len(self.members))):
            worker = threading.Thread(
                target=self.worker,
                args=(todo, work, include_stopped),
                name=f"envlock-member-{n}",
                daemon=True,
            )
            worker.start()
        interrupted = False
        with self.interrupts_counted():
            while len(self.results) < len(self.members):
                with contextlib.suppress(queue.Empty):
                    self.finished.get(timeout=0.2)
                if self.interrupts and not interrupted:
                    interrupted = True
                    self.stop.set()
                    ui.error(
                        "interrupted: no new member starts; waiting for those in flight to "
                        "finish (Ctrl-C again to stop waiting)"
                    )
                if self.interrupts > 1:
                    self.abandon()
                    break
        results = {m: self.results.get(m) or self.left(m) for m in self.members}
        if self.failed_first is not None and not interrupted:
            for result in results.values():
                if result.result == "not started":
                    result.note = f"--fail-fast: {self.failed_first.label} failed"
        return results, interrupted

    @contextlib.contextmanager
    def interrupts_counted(self) -> Iterator[None]:
        """Ctrl-C (or SIGTERM) counted rather than raised while the members run, so that
        one arriving anywhere in the waiting loop is handled the same way."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def count(signum: int, frame: object) -> None:
            self.interrupts += 1
            self.finished.put(None)  # wakes the loop (SimpleQueue.put is reentrant)

        previous = {sig: signal.signal(sig, count) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

    def abandon(self) -> None:
        """Stop waiting for the members in flight: their local ssh clients end, their agents
        finish on their own (under their roots' locks)."""
        self.sessions.end()
        shown = ", ".join(m.label for m in self.members if m in self.in_flight) or "none"
        ui.error(f"interrupted again: not waiting for the members in flight ({shown})")

    def left(self, member: Member) -> MemberResult:
        """The result of a member that a second Ctrl-C stopped waiting for, or never ran."""
        started = self.in_flight.get(member)
        if started is not None:
            seconds = time.perf_counter() - started
            return MemberResult(EXIT_FAILED, "interrupted", note=NOT_WAITED, seconds=seconds)
        return MemberResult(0, "not started", note="interrupted before it started")


# A member in flight that a second Ctrl-C stopped waiting for.
NOT_WAITED = (
    "not waited for after a second Ctrl-C: its agent finishes or leaves the root as it was "
    "(`envlock check` shows where it ended)"
)


def run_fleet(
    ctx: Context,
    work: Work,
    *,
    on: tuple[str, ...],
    jobs: int,
    as_json: bool,
    fail_fast: bool = False,
    include_stopped: bool = False,
    command: str = "",
    members: list[Member] | None = None,
) -> NoReturn:
    """Run `work` on every selected member (or on `members`, already selected), print the
    summary and exit with the worst code."""
    if members is None:
        members = members_of(ctx, on)
    fleet = Fleet(ctx, members, quiet=as_json)
    if not as_json:
        ui.info(f"{command}: {len(members)} container(s), {min(jobs, len(members))} at a time")
    results, interrupted = fleet.run(
        work, jobs=jobs, fail_fast=fail_fast, include_stopped=include_stopped
    )
    ordered = [(m, results[m]) for m in ordered_members(ctx, members, results)]
    code = worst(r.code for _, r in ordered)
    headline = fleet_headline(ctx, ordered)
    if as_json:
        ui.emit_json(
            "fleet",
            {
                "members": [member_json(m, r) for m, r in ordered],
                "fleet": {
                    "profile": ctx.profile.name,
                    "lock_id": ctx.lock.short_hash,
                    "members": len(members),
                    "summary": headline,
                    "exit": EXIT_INTERRUPTED if interrupted else code,
                    "interrupted": interrupted,
                },
            },
        )
    else:
        ui.out.print(ui.escape(headline))
        ui.table(summary_table(ordered))
        if interrupted:
            ui.error(interrupted_words(ordered))
    raise SystemExit(EXIT_INTERRUPTED if interrupted else code)


def worst(codes: Any) -> int:
    return max((c for c in codes if c in SEVERITY), default=0)


def differs(ctx: Context, result: MemberResult) -> bool:
    other_lock = bool(result.lock) and result.lock != ctx.lock.short_hash
    return result.code != 0 or result.hold or other_lock


def ordered_members(
    ctx: Context, members: list[Member], results: dict[Member, MemberResult]
) -> list[Member]:
    """Members that differ (fail, drift, another lock, held) before those that agree."""
    return sorted(members, key=lambda m: (not differs(ctx, results[m]), m.order))


def fleet_headline(ctx: Context, ordered: list[tuple[Member, MemberResult]]) -> str:
    """The fleet's answer in one line: "3 containers: 2 on lock … (generation 2), 1 on
    lock … (pve2/203, rolled back)"; the profile's lock first, then the others."""
    groups: dict[str, list[tuple[Member, MemberResult]]] = {}
    for m, r in ordered:
        key = r.lock if r.lock and r.result not in ("failed", "stopped") else r.result
        groups.setdefault(key, []).append((m, r))
    parts = []
    for key, group in sorted(
        groups.items(), key=lambda kv: (kv[0] != ctx.lock.short_hash, -len(kv[1]))
    ):
        agree = key == ctx.lock.short_hash and not any(r.hold for _, r in group)
        if any(r.lock for _, r in group) and key == group[0][1].lock:
            gens = sorted({r.generation for _, r in group if r.generation is not None})
            words = f"{len(group)} on lock {key}"
            extra = (
                ["generation" + ("s " if len(gens) > 1 else " ") + ", ".join(map(str, gens))]
                if gens
                else []
            )
        else:
            words, extra = f"{len(group)} {key}", []
        if not agree:
            extra = [f"{m.label}{', ' + note_of(r) if note_of(r) else ''}" for m, r in group]
        parts.append(words + (f" ({'; '.join(extra)})" if extra else ""))
    return f"{ui.plural(len(ordered), 'container')}: " + ", ".join(parts)


def note_of(result: MemberResult) -> str:
    if result.hold:
        return "rolled back"
    if result.result in ("failed", "stopped", "not started"):
        return ""
    if result.drift:
        return f"{result.drift} drift item(s)"
    return ""


def summary_table(ordered: list[tuple[Member, MemberResult]]) -> Table:
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("member", "node", "generation", "lock", "hold", "drift", "result", "time"):
        table.add_column(column)
    for m, r in ordered:
        result = r.result + (f": {cause_of(r.note)}" if r.note else "")  # the cause, short
        table.add_row(
            ui.escape(m.key),
            ui.escape(m.node),
            "" if r.generation is None else str(r.generation),
            r.lock,
            "held" if r.hold else "",
            "" if r.drift is None else str(r.drift),
            ui.escape(result),
            f"{r.seconds:.1f}s" if r.result != "not started" else "",
        )
    return table


def member_json(m: Member, r: MemberResult) -> dict[str, Any]:
    return {
        "member": m.label,
        "vmid": m.vmid,
        "node": m.node,
        "name": m.name,
        "status": m.status,
        "exit": r.code,
        "result": r.result,
        # one name per concept, as in every single-target document: the generation's
        # name ("3-<lock id>"), and "drift" the items where the command lists them
        "generation": f"{r.generation}-{r.lock}" if r.generation is not None else None,
        "generation_number": r.generation,
        "generation_lock_id": r.lock or None,  # "lock_id" is the profile's, as in `check --json`
        "held": r.hold,  # "hold" is the hold's record in `check --json`
        "drift_count": r.drift,
        "note": r.note or None,
        "cause": cause_of(r.note) if r.result == "failed" else None,
        "seconds": round(r.seconds, 3),
        **r.data,
    }


def interrupted_words(ordered: list[tuple[Member, MemberResult]]) -> str:
    """Which members did what before the interrupt stopped the scheduling."""
    ran = [f"{m.label} {r.result}" for m, r in ordered if r.result != "not started"]
    skipped = [m.label for m, r in ordered if r.result == "not started"]
    return (
        f"interrupted: {'; '.join(ran) or 'no member ran'}"
        + (f"; not started: {', '.join(skipped)}" if skipped else "")
        + "; a rerun converges the rest"
    )
