"""One command across a fleet: every selected container of a Proxmox cluster.

A fleet is a list of member Contexts (the profile and its lock, each with a Target of its
own: a concrete vmid, node and ssh host). Each member runs the single-target code path of
the command (a `work` function taking a Context and returning a MemberResult) in a thread
pool of `--jobs` workers; one ssh master per node is opened before the node's first member
runs, and shared by the node's containers. Then one summary: the fleet's answer in a line,
and a table with the members that differ first.

Ctrl-C stops scheduling: members in flight finish (the agent on a target runs under its
root's lock and either finishes or leaves the root as it was), the rest are "not started".
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, NoReturn

from rich.table import Table

from envlock import ui
from envlock.errors import EXIT_FAILED, EXIT_INTERRUPTED, EnvlockError, UsageError
from envlock.proxmox.fleet import Member, list_members, restrict
from envlock.reconcile.context import Context
from envlock.targets.pct import ContainerNotRunning

Progress = Callable[[str], None]
DEFAULT_JOBS = 4
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


def is_fleet(ctx: Context) -> bool:
    return getattr(ctx.profile.target.settings, "fleet", None) is not None


def member_context(ctx: Context, member: Member) -> Context:
    """The fleet's context narrowed to one member: same profile and lock, its own target."""
    target = ctx.profile.target
    settings = target.settings.member(member.vmid, member.node)
    profile = dataclasses.replace(
        ctx.profile, target=dataclasses.replace(target, settings=settings)
    )
    return Context(profile, ctx.lock, profile.target.transport(), ctx.stale)


def members_of(ctx: Context, on: tuple[str, ...]) -> list[Member]:
    members = restrict(list_members(ctx.profile.target.settings), on)
    if not members:
        raise UsageError(
            "the fleet's selection matches no container of the cluster",
            hint="check [target] vmids or select against the cluster's containers",
        )
    return members


def one_member(ctx: Context, on: tuple[str, ...], command: str) -> Context:
    """The context of the one member `--on` picks (commands that act on a single one)."""
    if not on:
        raise UsageError(
            f"`envlock {command}` acts on one container, and this profile names a fleet",
            hint="pick one with --on VMID; running across members is the scheduler's job",
        )
    members = members_of(ctx, on)
    if len(members) != 1:
        raise UsageError(
            f"--on picks {len(members)} members ({', '.join(m.label for m in members)}): "
            f"`envlock {command}` acts on exactly one",
            hint="pick one with --on VMID",
        )
    return member_context(ctx, members[0])


class Fleet:
    """The members of one command, run with bounded concurrency."""

    def __init__(self, ctx: Context, members: list[Member], *, quiet: bool) -> None:
        self.ctx = ctx
        self.members = members
        self.quiet = quiet
        self.stop = threading.Event()
        self.node_locks = {m.node: threading.Lock() for m in members}
        self.node_ready: dict[str, EnvlockError | None] = {}

    def progress(self, member: Member) -> Progress:
        if self.quiet:
            return lambda line: None
        return lambda line: ui.info(f"{member.label}: {line.strip()}")

    def open_node(self, member: Member, mctx: Context) -> None:
        """One ssh master per node, opened before its first member runs: the node's other
        members wait for it and share it (the ssh transport multiplexes per connection)."""
        with self.node_locks[member.node]:
            if member.node not in self.node_ready:
                try:
                    mctx.transport.node.run(["true"])  # type: ignore[attr-defined]
                    self.node_ready[member.node] = None
                except EnvlockError as exc:
                    self.node_ready[member.node] = exc
        problem = self.node_ready[member.node]
        if problem is not None:
            raise problem

    def run_member(self, member: Member, work: Work, include_stopped: bool) -> MemberResult:
        if self.stop.is_set():
            return MemberResult(0, "not started", note="interrupted before it started")
        started = time.perf_counter()
        progress = self.progress(member)
        try:
            if not member.running and not include_stopped:
                raise ContainerNotRunning(f"container {member.vmid} is {member.status}")
            mctx = member_context(self.ctx, member)
            self.open_node(member, mctx)
            result = work(mctx, progress)
        except ContainerNotRunning as exc:
            result = MemberResult(EXIT_FAILED, "stopped", note=exc.message)
        except EnvlockError as exc:
            result = MemberResult(exc.exit_code, "failed", note=exc.message)
        except Exception as exc:  # one member's bug must not hide the others' results
            result = MemberResult(EXIT_FAILED, "failed", note=f"{type(exc).__name__}: {exc}")
        result.seconds = time.perf_counter() - started
        progress(f"{result.result}" + (f": {result.note}" if result.note else ""))
        return result

    def run(
        self, work: Work, *, jobs: int, fail_fast: bool, include_stopped: bool
    ) -> tuple[dict[Member, MemberResult], bool]:
        """Every member's result, and whether an interrupt stopped the scheduling."""
        results: dict[Member, MemberResult] = {}
        interrupted = False
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="envlock-member")
        futures: dict[Future[MemberResult], Member] = {
            pool.submit(self.run_member, m, work, include_stopped): m for m in self.members
        }
        pending = set(futures)
        while pending:
            try:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                if interrupted:
                    raise  # a second Ctrl-C: stop waiting
                interrupted = True
                self.stop.set()
                ui.error(
                    "interrupted: no new member starts; waiting for those in flight to "
                    "finish (Ctrl-C again to stop waiting)"
                )
                continue
            for future in done:
                result = future.result()
                results[futures[future]] = result
                if fail_fast and result.code >= 2 and result.result != "not started":
                    self.stop.set()
        pool.shutdown(wait=True)
        if fail_fast:
            for result in results.values():
                if result.result == "not started" and not interrupted:
                    result.note = "--fail-fast: a member failed before it started"
        return results, interrupted


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
) -> NoReturn:
    """Run `work` on every selected member, print the summary and exit with the worst code."""
    if jobs < 1:
        raise UsageError(f"--jobs expects at least 1, found {jobs}")
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
            {
                "members": [member_json(m, r) for m, r in ordered],
                "fleet": {
                    "profile": ctx.profile.name,
                    "lock": ctx.lock.short_hash,
                    "members": len(members),
                    "summary": headline,
                    "exit": EXIT_INTERRUPTED if interrupted else code,
                    "interrupted": interrupted,
                },
            }
        )
    else:
        ui.out.print(ui.escape(headline))
        ui.out.print(summary_table(ordered))
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
    return sorted(members, key=lambda m: (not differs(ctx, results[m]), m.vmid))


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
    return f"{len(ordered)} containers: " + ", ".join(parts)


def note_of(result: MemberResult) -> str:
    if result.hold:
        return "rolled back"
    if result.result in ("failed", "stopped", "not started"):
        return ""
    if result.drift:
        return f"{result.drift} drift item(s)"
    return ""


def summary_table(ordered: list[tuple[Member, MemberResult]]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("member", "node", "generation", "lock", "hold", "drift", "result", "time"):
        table.add_column(column)
    for m, r in ordered:
        result = r.result + (f": {r.note.splitlines()[0]}" if r.note else "")
        table.add_row(
            str(m.vmid),
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
        "generation": r.generation,
        "lock": r.lock or None,
        "hold": r.hold,
        "drift": r.drift,
        "note": r.note or None,
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
