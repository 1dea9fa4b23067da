"""`envlock run PROFILE -- CMD…`: run CMD in the locked environment, refusing on drift."""

from __future__ import annotations

import os
import sys

import click

from envlock import ui
from envlock.commands.common import drift_table, with_context
from envlock.errors import EXIT_DRIFT, UsageError
from envlock.reconcile.context import Context, check
from envlock.reconcile.kinds import blocking
from envlock.runs.environment import compile_artifacts_env, run_environment
from envlock.runs.snapshot import build_snapshot
from envlock.runs.snapshot_file import write_snapshot


@click.command("run", context_settings={"ignore_unknown_options": True})
@with_context(allow_stale=True)
@click.option("--allow-drift", is_flag=True, help="Run even when the check finds drift.")
@click.option(
    "--snapshot-into",
    "snapshot_dir",
    type=click.Path(file_okay=False),
    help="Write DIR/envlock-snapshot.json before CMD starts.",
)
@click.option(
    "--compile-artifacts",
    "artifacts",
    type=click.Path(dir_okay=False, exists=True),
    help="Load this torch mega-cache file (saved by envlock_megacache.save) into the "
    "command's Python before it starts (local targets).",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    ctx: Context,
    allow_drift: bool,
    snapshot_dir: str | None,
    artifacts: str | None,
    cmd: tuple[str, ...],
) -> None:
    """Run CMD with the environment's bin first on PATH, its caches and [env]."""
    argv = list(cmd[1:] if cmd and cmd[0] == "--" else cmd)
    if not argv:
        raise UsageError("no command given", hint="envlock run PROFILE -- python train.py")
    state, drifts = check(ctx, warmth=bool(snapshot_dir))  # a snapshot records the warmth
    refusing = blocking(drifts)
    if state.current is None or not state.in_generation:
        ui.error("no working environment on the target")
        ui.err.print(drift_table(drifts))
        sys.exit(EXIT_DRIFT)
    if refusing and not allow_drift:
        ui.error(
            f"refusing to run: {len(refusing)} drift item(s); repair with `envlock apply` "
            "or `envlock rollback`, or pass --allow-drift"
        )
        ui.err.print(drift_table(refusing))
        sys.exit(EXIT_DRIFT)
    if refusing:
        ui.warn(f"running despite {len(refusing)} drift item(s) (--allow-drift)")
    env = run_environment(ctx.profile, state, os.environ)
    if artifacts:
        if ctx.profile.target.remote:
            raise UsageError(
                "--compile-artifacts works on local targets",
                hint="on a remote target, add envlock to the environment's packages and load "
                "them in the script: envlock.startup.envlock_megacache.load(FILE)",
            )
        env.update(compile_artifacts_env(os.path.abspath(artifacts)))
    if snapshot_dir:
        data = build_snapshot(ctx, state, environ=env, command=argv)
        ui.info(f"envlock: snapshot written to {write_snapshot(snapshot_dir, data)}")
    sys.exit(ctx.transport.exec(argv, env))
