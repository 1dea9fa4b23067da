"""`envlock run PROFILE -- CMD…`: run CMD in the locked environment, refusing on drift."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import click

from envlock import ui
from envlock.commands.common import (
    across_fleet,
    drift_table,
    json_option,
    print_fixes,
    with_context,
)
from envlock.errors import EnvlockError, UsageError
from envlock.ownership import untrusted
from envlock.profile import pass_env_refusal
from envlock.reconcile.context import Context, check_all, hold_notice
from envlock.reconcile.drift import trust_drift
from envlock.reconcile.kinds import Drift, Repair, blocking, of_repair
from envlock.reconcile.state import Trust
from envlock.runs.environment import (
    SCRUBBED,
    command_environment,
    compile_artifacts_env,
    generation_dir,
)
from envlock.runs.launch import exec_local, refused_exit, remote_spec, run_remote


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
    # A snapshot records the cache's warmth and the active generation's own lock.
    wanted = bool(snapshot_dir)
    # The container's drift refuses a run like any other.
    _container, state, drifts = check_all(
        ctx, deep=deep, warmth=wanted, lock=wanted, meanwhile=ui.prepare
    )
    if state is None:
        refuse(ctx, "the container is not running", drifts)
    refusing = blocking(drifts)
    owned = of_repair(drifts, Repair.OWNER)
    if owned:  # not even --allow-drift: it would run another user's interpreter as us
        refuse(ctx, "refusing to run: a directory it needs is not yours", owned)
    if state.current is None or not state.in_generation:
        refuse(ctx, "no working environment on the target", drifts)
    if refusing and not allow_drift:
        refuse(ctx, f"refusing to run: {len(refusing)} drift item(s)", refusing, allow=True)
    if refusing:
        ui.warn(f"running despite {len(refusing)} drift item(s) (--allow-drift)")
    notice = hold_notice(ctx, state)
    if notice:
        ui.info(f"envlock: {notice}")
    remote = ctx.profile.target.remote
    env = command_environment(ctx, state, passed_env(ctx, names) if remote else os.environ)
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
    ui.err.print(drift_table(drifts))
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
    missing = [name for name in wanted if name not in os.environ]
    if missing:
        ui.warn(f"not set here, so not passed to the target: {', '.join(missing)}")
    return {name: os.environ[name] for name in wanted if name in os.environ}
