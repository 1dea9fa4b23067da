"""`envlock check PROFILE`: report drift before a run."""

from __future__ import annotations

import os
import sys

import click

from envlock import ui
from envlock.apply import check, open_context
from envlock.cache import cache_warnings
from envlock.commands.common import json_option, print_drift, profile_argument
from envlock.errors import EXIT_DRIFT
from envlock.provision import check_container, has_container

CHECK_SCHEMA = 1


@click.command("check")
@profile_argument
@click.option("--deep", is_flag=True, help="Re-hash every file against the wheels' RECORDs.")
@json_option
def command(profile: str, deep: bool, as_json: bool) -> None:
    """Report drift between the target and the lock (exit 1 on drift)."""
    ctx = open_context(profile, allow_stale=True)
    container = check_container(ctx.profile) if has_container(ctx.profile) else None
    with ui.status("checking", quiet=as_json or not deep):
        if container is not None and not container.running:
            state, drifts = None, list(container.drifts)  # nothing inside can be reached
        else:
            state, drifts = check(ctx, deep=deep)
            drifts = list(container.drifts if container else ()) + drifts
    files = (state.files if state else None) or {}
    local = ctx.profile.target.type == "local"
    warnings = cache_warnings(state.cache, dict(os.environ), local) if state else []
    if as_json:
        ui.emit_json(
            {
                "schema": CHECK_SCHEMA,
                "profile": ctx.profile.name,
                "lock": ctx.lock.short_hash,
                "generation": state.current if state else None,
                "deep": deep,
                "files_checked": files.get("checked", 0),
                "clean": not drifts,
                "drift": [d.to_json() for d in drifts],
                "warnings": warnings,
            }
        )
    else:
        gen = state.current_generation if state else None
        where = f"generation {gen.number}" if gen else "target"
        mode = "deep" if deep else "fast"
        print_drift(
            drifts,
            f"{where} matches lock {ctx.lock.short_hash} ({mode} check, "
            f"{files.get('checked', 0)} files)",
        )
        for warning in warnings:
            ui.warn(warning)
    sys.exit(EXIT_DRIFT if drifts else 0)
