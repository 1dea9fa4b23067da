"""`envlock bisect PROFILE GOOD BAD -- CMD…`: which difference between two runs made CMD worse.

GOOD and BAD are snapshots (or directories holding one, or locks). The differences envlock can
reproduce (runs/bisect.py) are searched by delta debugging (runs/bisect_search.py) for the
smallest set that turns GOOD's measurement into BAD's; each probe is a real generation on the
profile's target (commands/bisect_lab.py). Exit 0: a cause found; 1: no answer (the ends do not
separate, a probe could not be judged, or nothing reproducible differs); 2: usage; 3: an
operation failed. Interrupted, the active generation is as it was.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from envlock import ui
from envlock.commands.bisect_lab import BisectLab, Measuring, clean_work
from envlock.commands.common import json_option, profile_argument
from envlock.errors import EXIT_DRIFT, INTERRUPTED, UsageError
from envlock.profile.read import Profile
from envlock.reconcile.context import is_fleet, open_context
from envlock.runs.bisect import (
    CONFIG,
    DATA,
    Difference,
    cache_difference,
    config_variable,
    env_differences,
    merged,
    neighbours,
    package_differences,
    pins,
    variable_difference,
)
from envlock.runs.bisect_inputs import (
    End,
    not_tried,
    read_end,
    reproducible_env,
    resolve_pins,
)
from envlock.runs.bisect_search import (
    FOUND,
    Answer,
    Probe,
    Search,
    Settings,
    Summary,
    describe,
    fmt,
    single_cause_builds,
)

KIND = "bisect"


@click.command("bisect", context_settings={"ignore_unknown_options": True})
@profile_argument
@click.argument("good", metavar="GOOD")
@click.argument("bad", metavar="BAD")
@click.option(
    "--metric",
    metavar="NAME",
    help="Judge by this number: the last JSON line of CMD's output with that key, or the "
    "metric of an envlock.snapshot(metrics=…) written into $ENVLOCK_BISECT_DIR. Without it, "
    "CMD's exit status decides (0 good, 125 skip, any other bad).",
)
@click.option(
    "--threshold",
    type=float,
    help="With --metric: the value between good and bad (default: halfway between the ends).",
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 50),
    default=3,
    show_default=True,
    help="Runs of CMD per probe (with --metric, then one run of an end, each end in turn).",
)
@click.option(
    "--data",
    "data",
    multiple=True,
    metavar="NAME=A,B",
    help="A dataset to try: CMD gets the variable NAME set to path A (GOOD's) or B (BAD's).",
)
@click.option(
    "--config",
    "config",
    multiple=True,
    metavar="KEY",
    help="A config value of the two snapshots to try, given to CMD as the variable KEY "
    "upper-cased (model.lr → MODEL_LR).",
)
@click.option("--keep", is_flag=True, help="Keep the probes' generations (removed otherwise).")
@json_option
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    profile: str,
    good: str,
    bad: str,
    metric: str | None,
    threshold: float | None,
    repeat: int,
    data: tuple[str, ...],
    config: tuple[str, ...],
    keep: bool,
    as_json: bool,
    cmd: tuple[str, ...],
) -> None:
    """Find which differences between GOOD and BAD make CMD's result BAD's, by measuring."""
    argv = list(cmd[1:] if cmd and cmd[0] == "--" else cmd)
    if not argv:
        raise UsageError("no command given", hint="envlock bisect PROFILE GOOD BAD -- CMD…")
    if threshold is not None and metric is None:
        raise UsageError("--threshold goes with --metric", hint="add --metric NAME")
    result = bisect_of(
        profile,
        good,
        bad,
        Measuring(metric, argv),
        Settings(metric is not None, repeat, threshold),
        data=data,
        config=config,
        keep=keep,
        progress=say_progress,
    )
    if as_json:
        ui.emit_json(KIND, result.to_json())
    else:
        render_text(result)
    sys.exit(result.code)


def say_progress(line: str) -> None:
    ui.info(f"  {line}")


@dataclass(frozen=True)
class BisectResult:
    good: str
    bad: str
    differences: list[Difference]
    notes: list[str]
    not_tried: list[str]
    answer: Answer
    metric: str | None
    removed: list[str]
    kept: bool
    seconds: float

    @property
    def code(self) -> int:
        """0: a cause found; 1: no answer."""
        return 0 if self.answer.status == FOUND else EXIT_DRIFT

    def to_json(self) -> dict[str, Any]:
        answer = self.answer
        keys = [d.key for d in self.differences]
        return {
            "good": self.good,
            "bad": self.bad,
            "status": answer.status,
            "reason": answer.reason or None,
            "cause": [keys[i] for i in sorted(answer.cause)],
            "metric": self.metric,
            "threshold": answer.threshold,
            "ends": {
                "good": summary_json(answer.good_end),
                "bad": summary_json(answer.bad_end),
            },
            "differences": [d.to_json() for d in self.differences],
            "notes": self.notes,
            "not_tried": self.not_tried,
            "probes": [p.to_json(keys) for p in answer.probes],
            "builds": answer.builds,
            "generations_removed": [] if self.kept else self.removed,
            "generations_kept": self.removed if self.kept else [],
            "seconds": round(self.seconds, 3),
        }


def summary_json(values: list[float]) -> dict[str, Any]:
    summary = Summary.of(values)
    return {"values": values, **(summary.to_json() if summary else {})}


def bisect_of(
    profile_path: str,
    good_path: str,
    bad_path: str,
    measuring: Measuring,
    settings: Settings,
    *,
    data: tuple[str, ...],
    config: tuple[str, ...],
    keep: bool,
    progress: Callable[[str], None],
) -> BisectResult:
    started = time.perf_counter()
    ctx = open_context(profile_path, allow_stale=True)
    if is_fleet(ctx):
        raise UsageError(
            "bisect builds and measures on one target: not across a fleet",
            hint="bisect with a profile of one of its containers",
        )
    good, bad = read_end(good_path), read_end(bad_path)
    differences, notes = change_set(ctx.profile, good, bad, data, config)
    skipped = not_tried(good, bad, set(config))
    progress(f"{len(differences)} difference(s) to try: " + "; ".join(d.label for d in differences))
    work = Path(tempfile.mkdtemp(prefix="envlock-bisect-"))
    click.get_current_context().meta[INTERRUPTED] = (
        "the generation active before bisect is active again; the probes built are removed"
    )
    lab = BisectLab(ctx, good, bad, differences, measuring, work, progress)
    removed: list[str] = []
    try:
        names = [d.key.partition(":")[2] or d.key for d in differences]
        answer = Search(lab, len(differences), settings, progress, names).run()
    finally:
        try:
            removed = lab.close(keep)
        finally:
            clean_work(work)
    return BisectResult(
        good_path,
        bad_path,
        differences,
        notes,
        skipped,
        answer,
        measuring.metric,
        removed,
        keep,
        time.perf_counter() - started,
    )


# -- the change set ------------------------------------------------------------------------
def change_set(
    profile: Profile, good: End, bad: End, data: tuple[str, ...], config: tuple[str, ...]
) -> tuple[list[Difference], list[str]]:
    """Every difference a probe can reproduce, packages first; and notes on the units made."""
    gv, bv = good.lock.versions(), bad.lock.versions()
    needs_good = resolve_pins(profile, gv).needs
    needs_bad = resolve_pins(profile, bv).needs
    packages, notes = settled(
        profile, gv, bv, package_differences(gv, bv, needs_good, needs_bad), needs_good, needs_bad
    )
    found = [
        *packages,
        *env_differences(reproducible_env(good, bad), reproducible_env(bad, good)),
        *cache_difference(good.warm, bad.warm),
        *mapped_data(data),
        *mapped_config(config, good, bad),
    ]
    return found, notes


def settled(
    profile: Profile,
    gv: dict[str, str],
    bv: dict[str, str],
    units: list[Difference],
    needs_good: dict[str, set[str]],
    needs_bad: dict[str, set[str]],
) -> tuple[list[Difference], list[str]]:
    """Each package unit that does not resolve on GOOD alone moved with the units it is tied
    to (uv's dependency edges), until each does."""
    notes: list[str] = []
    alone_ok: set[str] = set()
    while True:
        unit = next((d for d in units if d.key not in alone_ok), None)
        if unit is None:
            return units, notes
        tied = neighbours(unit, units, needs_good, needs_bad)
        versions = pins(gv, bv, frozenset(m.name for m in unit.moves))
        # Asked of uv only where a requirement ties it to another unit to move with: one
        # tied to none is moved alone, and a probe that does not resolve says so then.
        resolved = resolve_pins(profile, versions) if tied and versions != bv else None
        if resolved is None or resolved.ok:
            alone_ok.add(unit.key)
            continue
        units = merged(units, [unit.key, *tied])
        joined = next(d for d in units if d.key in {unit.key, *tied})
        notes.append(
            f"moved as one unit: {joined.label} ({unit.label} does not resolve alone: "
            f"{resolved.why})"
        )


def mapped_data(data: tuple[str, ...]) -> list[Difference]:
    found = []
    for item in data:
        name, sep, paths = item.partition("=")
        a, comma, b = paths.partition(",")
        if not sep or not comma or not name.isidentifier() or not a or not b:
            raise UsageError(
                f"--data {item}: expected NAME=PATH_A,PATH_B",
                hint="e.g. --data TRAIN_DATA=/data/v1,/data/v2 (CMD reads $TRAIN_DATA)",
            )
        if a != b:
            found.append(variable_difference(DATA, name, name, a, b))
    return found


def mapped_config(keys: tuple[str, ...], good: End, bad: End) -> list[Difference]:
    found = []
    for key in keys:
        if not (good.is_run and bad.is_run):
            raise UsageError(
                f"--config {key}: GOOD and BAD must both be snapshots (a lock has no config)"
            )
        if key not in good.config and key not in bad.config:
            raise UsageError(
                f"--config {key}: neither snapshot's config has it",
                hint="`envlock diff GOOD BAD` lists the config keys that differ",
            )
        a, b = good.config.get(key), bad.config.get(key)
        if a != b:
            found.append(
                variable_difference(CONFIG, key, config_variable(key), as_text(a), as_text(b))
            )
    return found


def as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    import json

    return json.dumps(value)


# -- for people ----------------------------------------------------------------------------
def render_text(result: BisectResult) -> None:
    answer = result.answer
    labels = [d.label for d in result.differences]
    for note in result.notes:
        ui.info(f"note: {note}")
    if answer.status != FOUND:
        ui.out.print(f"[yellow]inconclusive:[/] {ui.escape(answer.reason)}")
        if answer.cause:
            shown = "; ".join(labels[i] for i in sorted(answer.cause))
            ui.out.print(f"  the search pointed at (not established): {ui.escape(shown)}")
    else:
        cause = " and ".join(labels[i] for i in sorted(answer.cause))
        line = f"the {'slowdown' if result.metric else 'failure'} follows {cause}"
        ui.out.print(f"[bold]{ui.escape(line)}[/]")
        ui.out.print(f"  {ui.escape(evidence(result))}")
        others = [labels[i] for i in range(len(labels)) if i not in answer.cause]
        if others:
            ui.out.print(f"  not the cause: {ui.escape('; '.join(others))}")
    for note in result.not_tried:
        ui.out.print(f"  not tried: {ui.escape(note)}")
    n = len(result.differences)
    kept = "kept" if result.kept else "removed"
    ui.out.print(
        f"  {len(answer.probes)} probe(s), {answer.builds} build(s) (a single cause of {n} "
        f"takes at most {single_cause_builds(n)}), {result.seconds:.1f}s; "
        f"{len(result.removed)} probe generation(s) {kept}"
    )


def evidence(result: BisectResult) -> str:
    answer = result.answer
    parts = [f"GOOD {ends(result, answer.good_end)}", f"BAD {ends(result, answer.bad_end)}"]
    if answer.alone is not None:
        parts.append(f"with it alone: {probe_text(result, answer.alone)}")
    if answer.rest is not None:
        parts.append(f"GOOD with everything else of BAD: {probe_text(result, answer.rest)}")
    if result.metric and answer.threshold is not None:
        parts.append(f"threshold {fmt(answer.threshold)}")
    return "; ".join(parts)


def ends(result: BisectResult, values: list[float]) -> str:
    if result.metric:
        return describe(values)
    return "exit " + ",".join(str(int(v)) for v in values)


def probe_text(result: BisectResult, probe: Probe) -> str:
    if probe.note:
        return f"{probe.outcome} ({probe.note})"
    return f"{probe.outcome}, {ends(result, probe.values)}"
