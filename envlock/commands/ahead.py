"""The probe of a local `check` or `run`, started before the CLI loads click and the command.

The commonest commands spend their fixed cost in two places, one after the other: the
controller's imports (click, the command's modules) and the probe, an interpreter of the
environment's own. Neither needs the other until the probe's answer is judged, so once the
profile and lock are read (the request is made of them), `start_ahead` starts the probe with
its request and the CLI goes on loading meanwhile: on two cores the two overlap. The local
transport adopts the process only when the command asks for exactly this command line and
request (envlock/started.py); any other argv (an option that changes the request, a remote
target, an error in the profile) starts nothing here, and the command runs as it always did.
"""

from __future__ import annotations

import json

from envlock import started

# The commands whose probe starts ahead, with their options that take a value (the profile
# is the first other argument) and those that change what the probe is asked.
VALUED = {
    "check": ("--jobs", "--on"),
    "run": ("--jobs", "--on", "--env", "--snapshot-into", "--compile-artifacts"),
}
CHANGING = ("--snapshot-into", "-h", "--help")


def start_ahead(args: list[str]) -> None:
    """Start the probe `envlock ARGS` will run, when ARGS is a local check or run."""
    found = profile_argument(args)
    if found is None:
        return
    path, deep = found
    try:
        start_probe(path, deep=deep)
    except Exception:  # the command itself reads the profile again and says what is wrong
        return


def profile_argument(args: list[str]) -> tuple[str, bool] | None:
    """(the PROFILE argument, --deep) of a check or run, else None."""
    rest = list(args)
    while rest and rest[0] in ("-v", "--verbose"):
        rest.pop(0)
    if not rest or rest[0] not in VALUED:
        return None
    valued = VALUED[rest.pop(0)]
    own = rest[: rest.index("--")] if "--" in rest else rest
    if any(arg in CHANGING or arg.startswith(CHANGING) for arg in own):
        return None
    skip = False
    for arg in own:
        if skip:
            skip = False
        elif arg in valued:
            skip = True
        elif not arg.startswith("-"):
            return arg, "--deep" in own
    return None


def start_probe(path: str, *, deep: bool) -> None:
    from envlock.reconcile.agentcall import agent_argv
    from envlock.reconcile.context import open_context, probe_request

    ctx = open_context(path, allow_stale=True)
    started.keep("context", (path, True), ctx)
    target = ctx.profile.target
    if target.remote or ctx.profile.container is not None:
        return
    argv = agent_argv(ctx.transport, target.root, "probe", env_python=True)
    started.start(argv, json.dumps(probe_request(ctx, deep=deep)).encode())
