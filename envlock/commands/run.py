"""`envlock run PROFILE -- CMD…`: run CMD in the locked environment, refusing on drift."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import click

from envlock import ui
from envlock.base.drift_kinds import Drift, Repair, blocking, of_repair
from envlock.base.inherited import given
from envlock.base.ownership import untrusted
from envlock.base.untrusted import open_named
from envlock.commands.ahead import in_one_call
from envlock.commands.common import (
    across_fleet,
    drift_table,
    json_option,
    print_fixes,
    with_context,
)
from envlock.errors import EnvlockError, OperationError, UsageError
from envlock.profile.read import pass_env_refusal
from envlock.reconcile.context import (
    Context,
    Probe,
    ProbeRequest,
    check_all,
    check_container,
    hold_notice,
    judge,
)
from envlock.reconcile.drift import trust_drift
from envlock.reconcile.state import State, Trust, parse_state
from envlock.runs.environment import (
    SCRUBBED,
    command_environment,
    compile_artifacts_env,
    generation_dir,
)
from envlock.runs.launch import (
    NOT_EXECUTABLE,
    NOT_FOUND,
    ended,
    exec_local,
    refusal_file,
    refused_exit,
    remote_spec,
    run_remote,
    said_refusal,
    spec_of,
)
from envlock.runs.one_call import (
    Changed,
    Started,
    Stopped,
    call_run,
    keep_state,
    remembered,
    run_probe,
    state_digest,
    terminal_size,
)
from envlock.runs.startup_set import startup_payload
from envlock.targets.base import ContainerCheck


def gated(path: str | None) -> str | None:
    """A file named on the command line, judged by the gate before anything runs: a FIFO,
    a device or a giant is refused now (exit 2), not met by the command's start-up."""
    if path is not None:
        with open_named(path, "cache archive"):
            pass
    return path


@click.command("run", context_settings={"ignore_unknown_options": True})
@with_context(allow_stale=True)
@across_fleet(None, command="run", one=True)
@click.option("--allow-drift", is_flag=True, help="Run even when the check finds drift.")
@click.option("--deep", is_flag=True, help="Re-hash every file before running (paranoid).")
@click.option(
    "--env",
    "names",
    multiple=True,
    metavar="NAME",
    help="Pass this variable of yours to a remote command (repeatable; see [run] pass-env).",
    callback=lambda _ctx, _param, names: refuse_composed(names),
)
@click.option(
    "--snapshot-into",
    "snapshot_dir",
    type=click.Path(file_okay=False),
    help="Write DIR/envlock-snapshot.json before CMD starts (refused when DIR holds one).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --snapshot-into: replace the snapshot already in DIR.",
)
@click.option(
    "--compile-artifacts",
    "artifacts",
    type=click.Path(dir_okay=False, exists=True),
    help="Load this torch mega-cache file (saved by envlock_megacache.save) into the "
    "command's Python before it starts (local targets).",
    callback=lambda _ctx, _param, path: gated(path),
)
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    ctx: Context,
    allow_drift: bool,
    deep: bool,
    names: tuple[str, ...],
    snapshot_dir: str | None,
    force: bool,
    artifacts: str | None,
    cmd: tuple[str, ...],
    as_json: bool,
) -> None:
    """Run CMD with the environment's bin first on PATH, its caches and [env]."""
    argv = list(cmd[1:] if cmd and cmd[0] == "--" else cmd)
    if not argv:
        raise UsageError("no command given", hint="envlock run PROFILE -- python train.py")
    if force and not snapshot_dir:
        raise UsageError("--force goes with --snapshot-into", hint="drop --force")
    remote = ctx.profile.target.remote
    if in_one_call(remote, snapshot=bool(snapshot_dir), artifacts=bool(artifacts)):
        base = passed_env(ctx, names)
        into = SnapshotInto(snapshot_dir, force) if snapshot_dir else None
        sys.exit(run_in_one_call(ctx, argv, base, deep=deep, allow_drift=allow_drift, into=into))
    # A snapshot records the cache's warmth and the active generation's own lock.
    wanted = bool(snapshot_dir)
    # The container's drift refuses a run like any other.
    _container, state, drifts = check_all(
        ctx, Probe(deep=deep, warmth=wanted, lock=wanted), meanwhile=ui.prepare_for_terminal
    )
    state = decide(ctx, state, drifts, allow_drift)
    env = command_environment(ctx, state, passed_env(ctx, names) if remote else given())
    if artifacts:
        if ctx.profile.target.remote:
            raise UsageError(
                "--compile-artifacts works on local targets",
                hint="on a remote target, add envlock to the environment's packages and load "
                "them in the script: envlock.startup.envlock_megacache.load(FILE)",
            )
        env.update(compile_artifacts_env(os.path.abspath(artifacts)))
    if snapshot_dir:
        # Imported here: every run pays start-up before the command starts; few snapshot.
        from envlock.runs.snapshot import build_snapshot
        from envlock.runs.snapshot_file import write_snapshot

        data = build_snapshot(ctx, state, environ=env, command=argv)
        # A snapshot already in DIR (a run's own, written by envlock.snapshot() with its
        # config and argv) is refused, not replaced: the command has not started yet.
        path = write_snapshot(snapshot_dir, data, replace=force)
        ui.info(f"envlock: snapshot written to {path}")
    gen = generation_dir(ctx.profile, state)
    if not remote:
        refuse_untrusted_local(ctx)
        exec_local(argv, env)
    spec = remote_spec(env, f"{gen}/bin", SCRUBBED, ctx.profile.env.get("PATH"))
    sys.exit(run_remote(ctx.transport, ctx.profile.target.root, argv, spec))


@dataclass(frozen=True)
class Verdict:
    """What run does with a state: refuse (why, the drift shown, whether --allow-drift would
    start it anyway), or start it after saying `notes` ((warn or info, text), in order)."""

    refusal: tuple[str, list[Drift], bool] | None = None
    notes: tuple[tuple[str, str], ...] = ()


def verdict(ctx: Context, state: State | None, drifts: list[Drift], allow_drift: bool) -> Verdict:
    """The one judgment of a state, for the run that starts now and for one proposed ahead."""
    if state is None:
        return Verdict(("the container is not running", drifts, False))
    refusing = blocking(drifts)
    owned = of_repair(drifts, Repair.OWNER)
    if owned:  # not even --allow-drift: it would run another user's interpreter as us
        return Verdict(("refusing to run: a directory it needs is not yours", owned, False))
    if state.current is None or not state.in_generation:
        return Verdict(("no working environment on the target", drifts, False))
    if refusing and not allow_drift:
        return Verdict((f"refusing to run: {len(refusing)} drift item(s)", refusing, True))
    notes = []
    if refusing:
        notes.append(("warn", f"running despite {len(refusing)} drift item(s) (--allow-drift)"))
    notice = hold_notice(ctx, state)
    if notice:
        notes.append(("info", f"envlock: {notice}"))
    return Verdict(notes=tuple(notes))


def decide(ctx: Context, state: State | None, drifts: list[Drift], allow_drift: bool) -> State:
    """Refuse (exits), or say the verdict's notes and return the state to start in."""
    judged = verdict(ctx, state, drifts, allow_drift)
    if judged.refusal is not None:
        why, shown, allow = judged.refusal
        refuse(ctx, why, shown, allow=allow)
    for level, text in judged.notes:
        (ui.warn if level == "warn" else ui.info)(text)
    assert state is not None
    return state


# How often the one-call run judges a state that changed under it before it gives up.
ATTEMPTS = 3


@dataclass(frozen=True)
class SnapshotInto:
    """`run --snapshot-into DIR` (`--force`: one already there is replaced)."""

    directory: str
    force: bool


def write_snapshot_of(
    ctx: Context, into: SnapshotInto, state: State, env: dict[str, str], argv: list[str]
) -> None:
    """The run's snapshot, of the state the command starts in (imported here: few runs
    snapshot). One already in DIR (a run's own, written by envlock.snapshot() with its
    config and argv) is refused, not replaced: the command has not started yet."""
    from envlock.runs.snapshot import build_snapshot
    from envlock.runs.snapshot_file import write_snapshot

    data = build_snapshot(ctx, state, environ=env, command=argv)
    path = write_snapshot(into.directory, data, replace=into.force)
    ui.info(f"envlock: snapshot written to {path}")


def snapshot_step(
    ctx: Context, into: SnapshotInto | None, state: State, launch: dict[str, Any]
) -> Callable[[], None] | None:
    """What the one call does once the agent found the state judged: the snapshot of it
    (the command's environment taken out of the request: it travels in `spec`)."""
    env = launch.pop("env")
    if into is None:
        return None
    return functools.partial(write_snapshot_of, ctx, into, state, env, launch["argv"])


def run_in_one_call(
    ctx: Context,
    argv: list[str],
    base: dict[str, str],
    *,
    deep: bool,
    allow_drift: bool,
    into: SnapshotInto | None = None,
) -> int:
    """The remote run in one agent call (runs/one_call.py): proposing the state remembered
    from the last run when it would start quietly, else the state a probe returns; a state
    that changed meanwhile comes back and is judged and explained as after any probe. From
    a terminal, the agent gives the command one of its own; with --snapshot-into, the
    snapshot of the state judged is written once the agent found it, before it starts."""
    root = ctx.profile.target.root
    # A snapshot records the cache's warmth and the active generation's own lock.
    asked = run_probe(ctx, deep=deep, snapshot=into is not None)
    request = ProbeRequest.of(ctx, asked).to_json()
    found: list[ContainerCheck | None] = []  # the container API's word, once asked
    proposal = proposed(ctx, request, allow_drift)
    raw = proposal
    for _ in range(ATTEMPTS):
        gate = None
        if proposal is not None:
            state = parse_state(proposal)
            if ctx.provisioner is not None:  # asked while the target probes
                gate = container_gate(ctx, state, allow_drift, found)
        else:
            if raw is None:  # a probe, and the container's API beside it (as check asks)
                container, fresh, drifts = check_all(ctx, asked, meanwhile=ui.prepare_for_terminal)
                found[:] = [container]
                raw = fresh.raw if fresh is not None else {}
            else:
                fresh, drifts = judged(ctx, found[0] if found else None, raw)
            state = decide(ctx, fresh, drifts, allow_drift)
        assert raw is not None
        launch = launch_request(ctx, request, raw, state, argv, base)
        if proposal is None or launch["startup"]:  # as it will be once this call starts
            kept = {**raw, "startup_ready": True} if launch["startup"] else raw
            keep_state(ctx, asked, kept)
        outcome = call_run(
            ctx.transport, root, launch, gate, snapshot_step(ctx, into, state, launch)
        )
        if isinstance(outcome, Started):
            code = ended(ctx.transport, outcome.code)
            if code in (NOT_EXECUTABLE, NOT_FOUND):
                said_refusal(ctx.transport, launch["refused"], code)
            return code
        # Stopped: the state as proposed, which the container's word changes; Changed: the
        # state the target answered; Failed: ask the usual way, which says why.
        raw = proposal if isinstance(outcome, Stopped) else None
        raw = outcome.raw if isinstance(outcome, Changed) else raw
        proposal = None
    raise OperationError(
        f"{ctx.transport.name}: the target's state changed {ATTEMPTS} times while `run` "
        "started the command (an apply or rollback at work?); nothing was started",
        hint="run it again",
    )


def proposed(ctx: Context, request: dict[str, Any], allow_drift: bool) -> dict[str, Any] | None:
    """The state remembered from the last run on this target, when it would start quietly
    (nothing to refuse, nothing to say); else None."""
    raw = remembered(ctx.transport, ctx.profile.target.root, request)
    if raw is None:
        return None
    state, drifts = judged(ctx, None, raw)
    return raw if quiet(verdict(ctx, state, drifts, allow_drift)) else None


def container_gate(
    ctx: Context, state: State, allow_drift: bool, found: list[ContainerCheck | None]
) -> Callable[[], bool]:
    """The container API's word on a proposed state: whether it still starts quietly."""

    def gate() -> bool:
        container = check_container(ctx)
        found[:] = [container]
        _, drifts = judged(ctx, container, state.raw)
        running = container is None or container.running
        return running and quiet(verdict(ctx, state, drifts, allow_drift))

    return gate


def quiet(judgment: Verdict) -> bool:
    return judgment.refusal is None and not judgment.notes


def judged(
    ctx: Context, container: ContainerCheck | None, raw: dict[str, Any]
) -> tuple[State, list[Drift]]:
    """A state the agent answered, with its drift and the container's, as check_all orders it."""
    state = parse_state(raw)
    return state, [*(container.drifts if container else ()), *judge(ctx, state)]


def launch_request(
    ctx: Context,
    request: dict[str, Any],
    raw: dict[str, Any],
    state: State,
    argv: list[str],
    base: dict[str, str],
) -> dict[str, Any]:
    """The agent's `run` request: start `argv` if the target's state is still `raw`."""
    env = command_environment(ctx, state, base, carried=True)
    gen = generation_dir(ctx.profile, state)
    return {
        "probe": request,
        "expect": state_digest(raw),
        "spec": spec_of(env, f"{gen}/bin", SCRUBBED, ctx.profile.env.get("PATH")),
        "argv": argv,
        "startup": None if state.startup_ready else startup_payload(ctx.profile.target.root),
        "refused": refusal_file(ctx.profile.target.root),  # said there if it cannot start
        "terminal": terminal_size(),
        "env": env,  # the snapshot's (taken out before the request travels)
    }


def refuse_untrusted_local(ctx: Context) -> None:
    """The ownership rule once more where the command starts: the probe's answer is a
    moment old, and this process is the one that runs the root's interpreter."""
    profile = ctx.profile
    trust = Trust(root=untrusted(profile.target.root), cache_dir=untrusted(profile.cache_dir))
    owned = trust_drift(trust, profile.target.root)
    if owned:
        refuse(ctx, "refusing to run: a directory it needs is not yours", owned)


def refuse(ctx: Context, why: str, drifts: list[Drift], *, allow: bool = False) -> NoReturn:
    """envlock's own refusal, unmistakable: `envlock:` first, the fixes that apply, and
    ENVLOCK_RUN_REFUSED_EXIT (default 1) as the status. Under --json, the same refusal as
    the error document, with the drift items."""
    if ui.JSON.asked:
        refusal = EnvlockError(why, details={"drift": [d.to_json() for d in drifts]})
        refusal.exit_code = refused_exit()
        raise refusal
    ui.err.print(f"[bold red]envlock:[/] {ui.escape(why)}")
    ui.table(drift_table(drifts), stderr=True)
    print_fixes(ctx, drifts)
    if allow:
        ui.info("  or run anyway: envlock run --allow-drift …")
    sys.exit(refused_exit())


def refuse_composed(names: tuple[str, ...]) -> tuple[str, ...]:
    """`--env` follows the rule of [run] pass-env, checked while parsing: before the profile
    and lock are even read."""
    for name in names:
        refusal = pass_env_refusal(name)
        if refusal:
            raise UsageError(f"--env {name}: {refusal[0]}", hint=refusal[1])
    return names


def passed_env(ctx: Context, names: tuple[str, ...]) -> dict[str, str]:
    """The caller's variables a remote command gets: only those named (`--env`, [run]
    pass-env); a named variable that is not set here is said, not invented."""
    wanted = dict.fromkeys([*ctx.profile.pass_env, *names])
    caller = given()
    missing = [name for name in wanted if name not in caller]
    if missing:
        ui.warn(f"not set here, so not passed to the target: {', '.join(missing)}")
    return {name: caller[name] for name in wanted if name in caller}
