"""`envlock init PROFILE`: write a starter profile for a target (refuses to overwrite)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envlock import ui
from envlock.commands.starter_file import refuse_existing, write_starter
from envlock.errors import UsageError
from envlock.starters.template import (
    Starter,
    StarterTarget,
    init_flags,
    misplaced_ssh_flags,
    missing_flags,
    starter_text,
)
from envlock.targets.base import TargetType
from envlock.targets.registry import TARGET_TYPES

if TYPE_CHECKING:
    from envlock.commands.init_from import ImportResult


class InitCommand(click.Command):
    """`envlock init`, whose --target choices and per-type options are read from the
    registry (targets/registry.py) whenever click asks (help, parsing): a registered type
    brings its starter's options with it."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        # The same objects each time click asks while parsing: built once per table.
        options = target_options(tuple(TARGET_TYPES.items()))
        return [params[0], *options, *params[1:]]  # after PROFILE


@functools.lru_cache(maxsize=4)
def target_options(rows: tuple[tuple[str, TargetType], ...]) -> tuple[click.Parameter, ...]:
    """--target, then the options of the types' starter rows, each once, its help naming
    the types that take it: `--host` is "ssh / proxmox-lxc: the host …"."""
    types = dict(rows)
    target = click.Option(
        ["--target", "target_type"],
        type=click.Choice(tuple(types)),
        default="local",
        show_default=True,
        help="Where the environment lives.",
    )
    return (
        target,
        *(
            click.Option(
                [flag.option, flag.key.replace("-", "_")],
                type=click.IntRange(*flag.integer) if flag.integer else None,
                multiple=flag.repeatable,
                metavar=flag.metavar,
                help=f"{' / '.join(names)}: {flag.help}",
            )
            for flag, names in init_flags(types)
        ),
    )


@click.command("init", cls=InitCommand)
@click.argument("profile", type=click.Path(dir_okay=False, path_type=Path), metavar="PROFILE")
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
    root: str | None,
    venv: str | None,
    python: str | None,
    torch: str | None,
    backend: str | None,
    from_venv: str | None,
    find_links: tuple[str, ...],
    offline: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Write a starter profile at PROFILE: commented, valid as written."""
    target = StarterTarget(target_type, root, venv, flag_values(flags))
    starter = starter_of(profile, target, python, torch, backend, find_links, offline)
    result = init_of(profile, starter, from_venv=from_venv, python_given=python, quiet=as_json)
    if as_json:
        ui.emit_json(result.kind, result.to_json())
    else:
        render_text(result)
    sys.exit(result.code)


def flag_values(given: Mapping[str, Any]) -> dict[str, Any]:
    """The target types' options as click gave them, by [target] key."""
    return {flag.key: given[flag.key.replace("-", "_")] for flag, _ in init_flags(TARGET_TYPES)}


def starter_of(
    profile: Path,
    target: StarterTarget,
    python: str | None,
    torch: str | None,
    backend: str | None,
    find_links: tuple[str, ...],
    offline: bool,
) -> Starter:
    """The options, checked together, as the starter profile they describe."""
    if backend is not None and torch is None:
        raise UsageError("--backend needs --torch VERSION", hint="e.g. --torch 2.13.0")
    misplaced = misplaced_ssh_flags(target)
    if misplaced is not None:
        raise UsageError(misplaced)
    missing = missing_flags(target)
    if missing:
        flag = missing[0]
        raise UsageError(
            f"--target {target.type} needs {flag.option}",
            hint=f"e.g. {flag.option} {flag.example}",
        )
    return Starter(
        name=profile_name(profile),
        target=target,
        python=python or f"{sys.version_info[0]}.{sys.version_info[1]}",
        torch=torch,
        backend=backend or ("cpu" if torch else None),
        find_links=find_links,
        offline=offline,
    )


KINDS = ("init", "init-from")


@dataclass(frozen=True)
class InitResult:
    """The starter profile written, and what to run next; with --from, what the venv read
    into it became (its own result: the lock and how it compares)."""

    profile: Path
    starter: Starter
    imported: ImportResult | None = None

    @property
    def kind(self) -> str:
        return KINDS[1] if self.imported else KINDS[0]

    @property
    def code(self) -> int:
        """--from: 0 when the lock installs exactly what is installed."""
        return self.imported.code if self.imported else 0

    @property
    def steps(self) -> list[str]:
        shown = ui.shown_path(self.profile)
        return [f"envlock lock {shown}", f"envlock apply {shown}"]

    def to_json(self) -> dict[str, Any]:
        if self.imported:
            return self.imported.to_json()
        return {
            "profile": str(self.profile),
            "name": self.starter.name,
            "target": self.starter.target.type,
            "next": self.steps,
        }


def init_of(
    profile: Path, starter: Starter, *, from_venv: str | None, python_given: str | None, quiet: bool
) -> InitResult:
    """The one producer of init's result: write the starter, or read --from's venv into it."""
    refuse_existing(profile)
    if from_venv is not None:
        from envlock.commands.init_from import init_from  # only --from pays for the importer

        imported = init_from(profile, starter, from_venv, python_given=python_given, quiet=quiet)
        return InitResult(profile, starter, imported)
    write_starter(profile, starter_text(starter))
    return InitResult(profile, starter)


def render_text(result: InitResult) -> None:
    if result.imported:
        from envlock.commands.init_from import render_imported

        render_imported(result.imported)
        return
    shown = ui.shown_path(result.profile)
    ui.out.print(f"[green]✓[/] wrote {ui.escape(shown)}: profile {ui.escape(result.starter.name)}")
    ui.out.print("next:\n" + "".join(f"  {ui.escape(step)}\n" for step in result.steps), end="")


def profile_name(profile: Path) -> str:
    name = profile.name.removesuffix(".toml")
    if not name or name.startswith(".") or not name.replace("-", "").replace("_", "").isalnum():
        raise UsageError(
            f"{profile}: a profile's file name is its name: letters, digits, - and _",
            hint="e.g. envlock init train-cu128.toml",
        )
    return name
