"""`envlock init PROFILE`: write a starter profile for a target (refuses to overwrite)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from envlock import ui
from envlock.commands.starter_file import refuse_existing, write_starter
from envlock.errors import UsageError
from envlock.starter import (
    FLAG_EXAMPLES,
    TARGET_TYPES,
    Starter,
    StarterTarget,
    misplaced_ssh_flags,
    missing_flags,
    ssh_types,
    starter_text,
)


@click.command("init")
@click.argument("profile", type=click.Path(dir_okay=False, path_type=Path), metavar="PROFILE")
@click.option(
    "--target",
    "target_type",
    type=click.Choice(TARGET_TYPES),
    default="local",
    show_default=True,
    help="Where the environment lives.",
)
@click.option("--host", help="ssh / proxmox-lxc: the host (or node) to ssh to.")
@click.option("--user", help="ssh / proxmox-lxc: the login name.")
@click.option("--port", type=click.IntRange(1, 65535), help="ssh / proxmox-lxc: the ssh port.")
@click.option("--identity-file", metavar="KEY", help="ssh / proxmox-lxc: the ssh key to use.")
@click.option(
    "--ssh-option",
    "ssh_options",
    multiple=True,
    metavar="OPTION",
    help="ssh / proxmox-lxc: an ssh -o option, e.g. UserKnownHostsFile=FILE (repeatable).",
)
@click.option("--node", help="proxmox-lxc: the Proxmox node's name.")
@click.option("--vmid", type=click.IntRange(100), help="proxmox-lxc: the container's VMID.")
@click.option("--api-url", help="proxmox-lxc: the Proxmox API (https://NODE:8006).")
@click.option("--root", help="Where generations are built (default: beside the profile).")
@click.option("--venv", help="The stable venv path, a link to the active generation.")
@click.option("--python", "python", help="The Python version (default: this machine's).")
@click.option("--torch", "torch", metavar="VERSION", help="Pin torch, e.g. 2.13.0.")
@click.option("--backend", help="torch's build: cpu, cu126, cu128, cu130, … (default cpu).")
@click.option(
    "--from",
    "from_venv",
    metavar="VENV",
    help="Read an existing venv on the target into the profile, lock it, and compare.",
)
@click.option(
    "--find-links",
    multiple=True,
    metavar="DIR",
    help="A wheel directory to resolve from (repeatable).",
)
@click.option("--offline", is_flag=True, help="Resolve from find-links only.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def command(
    profile: Path,
    target_type: str,
    host: str | None,
    user: str | None,
    port: int | None,
    identity_file: str | None,
    ssh_options: tuple[str, ...],
    node: str | None,
    vmid: int | None,
    api_url: str | None,
    root: str | None,
    venv: str | None,
    python: str | None,
    torch: str | None,
    backend: str | None,
    from_venv: str | None,
    find_links: tuple[str, ...],
    offline: bool,
    as_json: bool,
) -> None:
    """Write a starter profile at PROFILE: commented, valid as written."""
    if backend is not None and torch is None:
        raise UsageError("--backend needs --torch VERSION", hint="e.g. --torch 2.13.0")
    target = StarterTarget(
        target_type,
        host or None,
        user,
        port,
        node,
        vmid,
        api_url,
        root,
        venv,
        identity_file,
        ssh_options,
    )
    if misplaced_ssh_flags(target):
        raise UsageError(f"--identity-file and --ssh-option go with --target {ssh_types()}")
    missing = missing_flags(target)
    if missing:
        flag = missing[0]
        raise UsageError(
            f"--target {target_type} needs --{flag}", hint=f"e.g. {FLAG_EXAMPLES[flag]}"
        )
    starter = Starter(
        name=profile_name(profile),
        target=target,
        python=python or f"{sys.version_info[0]}.{sys.version_info[1]}",
        torch=torch,
        backend=backend or ("cpu" if torch else None),
        find_links=find_links,
        offline=offline,
    )
    refuse_existing(profile)
    if from_venv is not None:
        from envlock.commands.init_from import init_from

        sys.exit(init_from(profile, starter, from_venv, python_given=python, as_json=as_json))
    write_starter(profile, starter_text(starter))
    report(profile, starter, as_json)


def profile_name(profile: Path) -> str:
    name = profile.name.removesuffix(".toml")
    if not name or name.startswith(".") or not name.replace("-", "").replace("_", "").isalnum():
        raise UsageError(
            f"{profile}: a profile's file name is its name: letters, digits, - and _",
            hint="e.g. envlock init train-cu128.toml",
        )
    return name


def report(profile: Path, starter: Starter, as_json: bool) -> None:
    shown = ui.shown_path(profile)
    steps = [f"envlock lock {shown}", f"envlock apply {shown}"]
    if as_json:
        ui.emit_json(
            "init",
            {
                "profile": str(profile),
                "name": starter.name,
                "target": starter.target.type,
                "next": steps,
            },
        )
        return
    ui.out.print(f"[green]✓[/] wrote {ui.escape(shown)}: profile {ui.escape(starter.name)}")
    ui.out.print("next:\n" + "".join(f"  {ui.escape(step)}\n" for step in steps), end="")
