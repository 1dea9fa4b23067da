"""A command's probe (check, run, rollback, a local apply), started before click loads.

The commonest commands spend their fixed cost in two places, one after the other: the
controller's imports (click, the command's modules) and the probe, an interpreter of the
environment's own. Neither needs the other until the probe's answer is judged, so once the
profile and lock are read (the request is made of them), `start_ahead` starts the probe with
its request and the CLI goes on loading meanwhile: on two cores the two overlap. The local
transport adopts the process only when the command asks for exactly this command line and
request (envlock/base/started.py), locally or over ssh (and `pct exec`); any other argv (an option
that changes the request, a fleet, an error in the profile) starts nothing here, and the
command runs as it always did. A remote `run` checks and starts in one agent call: that call
starts here, waiting for its request, and the ssh transport adopts it when the run spawns
exactly that command line (it writes the request and the command's stdin itself).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

from envlock.base import started

if TYPE_CHECKING:
    from envlock.targets.base import Transport

# The commands whose probe starts ahead: their options that take a value (the profile is the
# first other argument), and those that make them ask something else first (or nothing).
VALUED = {
    "apply": ("--jobs", "--on", "--from-snapshot", "--allow-pth"),
    "check": ("--jobs", "--on"),
    "run": ("--jobs", "--on", "--env", "--snapshot-into", "--compile-artifacts"),
    "rollback": ("--jobs", "--on", "--to", "--snapshot"),
}
OTHERWISE = {
    "apply": ("--from-snapshot",),
    "check": (),
    "run": ("--snapshot-into",),
    "rollback": ("--resync", "--container"),
}
HELP = ("-h", "--help")


def start_ahead(args: list[str]) -> None:
    """Start the probe `envlock ARGS` will run, when ARGS is a check, run, rollback or apply."""
    found = profile_argument(args)
    if found is None:
        return
    command, path, deep = found
    # --snapshot-into never comes here (OTHERWISE); in_one_call asks the rest.
    artifacts = artifacts_asked(args)
    try:
        start_interpreter(path)
        start_probe(command, path, deep=deep, artifacts=artifacts)
    except Exception:  # the command itself reads the profile again and says what is wrong
        return


def profile_argument(args: list[str]) -> tuple[str, str, bool] | None:
    """(the command, its PROFILE argument, --deep) of a command in VALUED, else None."""
    rest = list(args)
    while rest and rest[0] in ("-v", "--verbose"):
        rest.pop(0)
    if not rest or rest[0] not in VALUED:
        return None
    command = rest.pop(0)
    valued = VALUED[command]
    own = rest[: rest.index("--")] if "--" in rest else rest
    refused = (*OTHERWISE[command], *HELP)
    if any(arg in refused or arg.startswith(tuple(f"{r}=" for r in refused)) for arg in own):
        return None
    skip = False
    for arg in own:
        if skip:
            skip = False
        elif arg in valued:
            skip = True
        elif not arg.startswith("-"):
            return command, arg, "--deep" in own
    return None


class LocalPython:
    """What own_python reads of the local transport (targets/local.py): its interpreter."""

    system_python = sys.executable


def start_interpreter(path: str) -> None:
    """A local profile's probe interpreter, started before the profile's code loads: it
    loads its own code and waits for the request (start_probe writes it). Read here with
    tomlread alone, [target] root found by the profile reader's own rule (local_paths.py): a
    root read otherwise only makes a command line nobody asks for, and that process is
    stopped unread at exit."""
    from envlock.base.pythons import own_python
    from envlock.base.tomlread import load_toml  # TOML is parsed there alone (test_trust_lock)
    from envlock.reconcile.agentcode import agent_bootstrap
    from envlock.targets.local_paths import controller_path, default_local_root

    data = load_toml(Path(path))
    target, profile = data.get("target"), data.get("profile")
    if not isinstance(target, dict) or target.get("type") != "local":
        return
    name = profile.get("name") if isinstance(profile, dict) else None
    if not isinstance(name, str):
        return
    root = target.get("root", default_local_root(name))
    if not isinstance(root, str):
        return
    program = agent_bootstrap("probe")
    transport = cast("Transport", LocalPython())
    full = str(controller_path(root, Path(path)))
    started.start(own_python(transport, program, "probe", root=full), None)


def in_one_call(remote: bool, *, snapshot: bool, artifacts: bool) -> bool:
    """Whether a `run` checks and starts in one agent call (commands/run.py): every run on a
    remote target (from a terminal too: the agent gives the command one; a snapshot is
    written between the agent's probe and its start), except with a mega-cache, which is
    local only."""
    del snapshot  # written inside the one call (commands/run.py)
    return remote and not artifacts


def artifacts_asked(args: list[str]) -> bool:
    own = args[: args.index("--")] if "--" in args else args
    return any(a == "--compile-artifacts" or a.startswith("--compile-artifacts=") for a in own)


def start_probe(command: str, path: str, *, deep: bool, artifacts: bool = False) -> None:
    from envlock.reconcile.agentcall import agent_argv
    from envlock.reconcile.context import Probe, ProbeRequest, is_fleet, open_context

    ctx = open_context(path, allow_stale=True)
    started.keep("context", (path, True), ctx)
    target = ctx.profile.target
    if is_fleet(ctx):  # a fleet probes its members
        return
    if command == "apply" and target.remote:
        return  # a container may first be started or changed: its probe comes after that
    line = getattr(ctx.transport, "command_line", None)
    if command == "run" and target.remote:
        # It checks and starts in one agent call: that call's connection and agent start
        # now and wait for the request, while click and run's code load (targets/ssh.py
        # adopts it in `spawn`); no probe of its own.
        if in_one_call(True, snapshot=False, artifacts=artifacts) and line is not None:
            start_remote_run(line(agent_argv(ctx.transport, target.root, "run", env_python=True)))
        return
    probe = line(agent_argv(ctx.transport, target.root, "probe", env_python=True)) if line else None
    if probe is None:
        return
    # What the command asks: rollback reads the generations, not the files (rollback_plan).
    asked = Probe(verify=False) if command == "rollback" else Probe(deep=deep)
    started.start(probe, json.dumps(ProbeRequest.of(ctx, asked).to_json()).encode())
    if command == "rollback" and not target.remote:  # the switch: the agent's apply, waiting
        started.start(agent_argv(ctx.transport, target.root, "apply", env_python=False), None)


def start_remote_run(argv: list[str] | None) -> None:
    if argv is None:
        return
    from envlock.targets.local import ignore_forwarded_signals  # as spawn starts it

    started.start(argv, None, preexec_fn=ignore_forwarded_signals)
