"""`envlock init PROFILE --from VENV`: survey an existing venv on the target (nothing from
it runs), write the profile it implies, lock it, and say how the lock compares."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from envlock import ui
from envlock.commands.starter_file import write_starter
from envlock.errors import EXIT_DRIFT, OperationError, UsageError
from envlock.profile.read import parse_profile
from envlock.starters.from_survey import Comparison, Import, Survey, compare, import_survey
from envlock.starters.template import Starter, starter_text
from envlock.targets.base import Target


@dataclass(frozen=True)
class ImportResult:
    """What `init --from` read and wrote: the venv's survey, the profile it implies, the
    lock (or why locking failed) and how the lock compares with what is installed."""

    profile: Path
    venv: str
    survey: Survey
    found: Import
    lock_path: Path | None
    comparison: Comparison | None
    failure: str  # the lock's error, when it failed
    adopting: bool = False  # [target] venv is the surveyed venv: `apply --adopt` keeps it
    tied: tuple[str, ...] = ()  # wheels the lock names by a path of this machine

    @property
    def code(self) -> int:
        """0 when the lock installs exactly what is installed."""
        exact = self.comparison is not None and self.comparison.exact
        return 0 if exact and not self.found.left_out else EXIT_DRIFT

    @property
    def steps(self) -> list[str]:
        shown = ui.shown_path(self.profile)
        apply = f"envlock apply --adopt {shown}" if self.adopting else f"envlock apply {shown}"
        return [apply, f"envlock run {shown} -- python …"]

    def to_json(self) -> dict[str, Any]:
        comparison = self.comparison
        return {
            "profile": str(self.profile),
            "from": self.venv,
            "installed": len(self.survey.installed),
            "lock_file": str(self.lock_path) if self.lock_path else None,
            "lock_error": self.failure or None,
            "comparison": comparison.to_json() if comparison else None,
            "left_out": self.found.left_out,
            "seeded": list(self.found.seeded),
            "next": self.steps,
            "machine_paths": list(self.tied),
        }


def init_from(
    profile: Path, starter: Starter, venv: str, *, python_given: str | None, quiet: bool
) -> ImportResult:
    """init --from's result: survey the venv, write the profile it implies, lock it."""
    target = parse_profile(profile, starter_text(starter)).target
    if not target.remote:
        venv = os.path.abspath(os.path.expanduser(venv))
    elif not venv.startswith("/"):
        raise UsageError(f"--from {venv}: a remote venv is named by its absolute path")
    survey = survey_venv(target, venv)
    if survey.managed:
        raise UsageError(
            f"{venv} is already managed by envlock (it is a generation)",
            hint="use the profile that built it; `envlock generations PROFILE` lists them",
        )
    found = import_survey(survey)
    if not found.python:
        raise UsageError(f"{venv}: pyvenv.cfg names no Python version")
    if python_given and python_given != found.python:
        raise UsageError(
            f"{venv} is a Python {found.python} venv, not {python_given}",
            hint=f"drop --python, or pass --python {found.python}",
        )
    if survey.missing_interpreter:
        raise UsageError(
            f"{venv} is a Python {found.python} venv, but its interpreter "
            f"{survey.missing_interpreter} (pyvenv.cfg's home) is not on the target: the "
            "venv was made on another machine, or its Python was removed",
            hint=f"install Python {found.python} on the target, or read a venv made with "
            "the target's own Python",
        )
    links = [*starter.find_links, *found.find_links]
    if not target.remote:  # the profile's relative paths are taken from its directory
        links = [relative_to(link, profile.parent) for link in links]
    # The profile's venv is a new path (the starter's default, or --venv), and the surveyed
    # venv stays exactly as it is beside the generations envlock builds; or --venv names the
    # surveyed venv itself, which `apply --adopt` then keeps as generation 0.
    chosen = starter.target.venv
    adopting = chosen is not None and os.path.abspath(chosen) == os.path.abspath(venv)
    where = (
        (
            f"[target] venv is {venv} itself: `envlock apply --adopt` keeps it as",
            "generation 0 (unchanged) and builds this lock beside it.",
        )
        if adopting
        else (
            f"{venv} itself is left as it is; the environment built from this profile is",
            "reached at [target] venv below.",
        )
    )
    imported = replace(
        starter,
        python=found.python,
        torch=found.torch or starter.torch,
        backend=found.backend or starter.backend,
        torch_packages=found.torch_packages,
        packages=found.packages,
        find_links=tuple(dict.fromkeys(links)),
        description=f"imported from {venv}",
        notes=(f"Imported by `envlock init --from {venv}`: {summary(survey, found)}.", *where),
    )
    prof = write_starter(profile, starter_text(imported))
    lock_path, comparison, failure, tied = lock_and_compare(prof, survey, quiet)
    return ImportResult(
        profile, venv, survey, found, lock_path, comparison, failure, adopting, tied
    )


def relative_to(path: str, directory: Path) -> str:
    full = os.path.abspath(os.path.expanduser(path))
    base = os.path.abspath(directory)
    inside = os.path.commonpath([full, base]) == base
    return os.path.relpath(full, base) if inside else full


def survey_venv(target: Target, venv: str) -> Survey:
    """The agent's survey, run by the target's own Python (isolated), not the venv's."""
    from envlock.reconcile.agentcall import call_agent

    raw = call_agent(target.transport(), target.root, "survey", {"venv": venv})
    if "problem" in raw:
        raise UsageError(
            str(raw["problem"]), hint="--from names a venv: the directory that holds pyvenv.cfg"
        )
    return Survey.from_json(raw)


def summary(survey: Survey, found: Import) -> str:
    pinned = len(found.packages) + len(found.torch_packages) + (1 if found.torch else 0)
    return f"{len(survey.installed)} distributions, {pinned} of them top-level and pinned"


def lock_and_compare(
    prof: Any, survey: Survey, quiet: bool
) -> tuple[Path | None, Comparison | None, str, tuple[str, ...]]:
    from envlock.lock.resolve import write_lock

    try:
        with ui.status(f"resolving {prof.path.name} with uv", quiet=quiet):
            lock, _ = write_lock(prof)
    except OperationError as exc:
        return None, None, str(exc), ()
    installed = {
        name: dist for name, dist in survey.installed.items() if name not in left_alone(survey)
    }
    return lock.path, compare(installed, lock.versions()), "", tuple(lock.machine_paths())


def left_alone(survey: Survey) -> set[str]:
    """What the comparison leaves out: the venv's own tooling, when nothing requires it."""
    return set(import_survey(survey).seeded)


def render_imported(result: ImportResult) -> None:
    """init --from's result for people."""
    survey, found, venv, comparison = result.survey, result.found, result.venv, result.comparison
    shown = ui.shown_path(result.profile)
    esc = ui.escape
    ui.out.print(f"[green]✓[/] wrote {esc(shown)} from {esc(venv)}: {esc(summary(survey, found))}")
    if found.seeded:
        ui.out.print(
            f"  not carried over: {esc(', '.join(found.seeded))} (the venv's own tooling; "
            "a generation has a pip that works through uv)"
        )
    for name, why in found.left_out.items():
        ui.out.print(f"  [yellow]not carried over[/] {esc(name)}: {ui.untrusted(why)}")
    if comparison is None:
        ui.out.print("[red]✗[/] the lock failed (the profile is written: edit its pins):")
        ui.out.print(ui.untrusted(result.failure))
        return
    ui.out.print(f"[green]✓[/] wrote {esc(result.lock_path.name if result.lock_path else '')}")
    if result.tied:
        tied = result.tied
        ui.out.print(
            f"note: the lock is tied to this machine: {len(tied)} wheel(s) by a local path "
            f"({esc(', '.join(tied[:2]))}{' …' if len(tied) > 2 else ''}); `lock --portable` "
            "refuses that"
        )
    if comparison.exact:
        ui.out.print(f"the lock installs exactly the {len(comparison.same)} installed packages")
    else:
        ui.out.print(f"the lock and {esc(venv)} differ ({len(comparison.same)} packages agree):")
        for name, (was, now) in comparison.moved.items():
            moved = f"{ui.untrusted(was)} → {esc(now)}"
            ui.out.print(f"  ~ {esc(name)} {moved} (the resolver moved it)")
        for name, was in comparison.not_locked.items():
            ui.out.print(f"  - {esc(name)} {ui.untrusted(was)} (installed, not in the lock)")
        for name, now in comparison.added.items():
            ui.out.print(f"  + {esc(name)} {esc(now)} (the lock adds it)")
    ui.out.print("next:\n" + "".join(f"  {esc(step)}\n" for step in result.steps), end="")
