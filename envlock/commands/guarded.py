"""What `envlock add` and `envlock remove` share: show the proposal, refuse torch moves,
ask, then write the profile and lock and apply them into a new generation."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from envlock import ui
from envlock.base.pairs import write_together
from envlock.base.untrusted import read_named
from envlock.commands.common import json_option
from envlock.commands.undo import Written, undone_on_failure
from envlock.edits.changes import LockChanges
from envlock.edits.guard import Proposal, Refused, propose, torch_refusal
from envlock.errors import EXIT_DRIFT, EXIT_USAGE
from envlock.lock.read import load_fresh_lock
from envlock.profile.edit import Edit
from envlock.profile.read import load_profile
from envlock.runs.diff import Change

if TYPE_CHECKING:
    from envlock.commands.apply import ApplyResult


def guarded_options(func: Callable[..., None]) -> Callable[..., None]:
    """--dry-run, -y and --allow-torch-change: the options add and remove share."""
    func = click.option(
        "--allow-torch-change",
        is_flag=True,
        help="Accept changes to [torch] packages, triton or torch's CUDA libraries.",
    )(func)
    func = click.option(
        "-y", "--yes", is_flag=True, help="Do not ask before writing and applying."
    )(func)
    func = json_option(func)
    return click.option(
        "--dry-run", is_flag=True, help="Show what would change; exit 1 if anything would."
    )(func)


@dataclass(frozen=True)
class Shown:
    """What add and remove say while they work, before their result exists: the proposal
    before the torch refusal and the question, the files once written (before the apply's
    plan). Silent under --json, where the document says it all."""

    proposal: Callable[[Proposal], None]
    written: Callable[[Proposal], None]


def shown(as_json: bool) -> Shown:
    if as_json:
        return Shown(lambda _proposal: None, lambda _proposal: None)
    return Shown(show, show_written)


@dataclass(frozen=True)
class ChangeResult:
    """What add or remove changes in the profile ("+ tqdm", "~ tqdm>=4.66 → tqdm", "= tqdm:
    already listed as tqdm>=4.66"), the lock it resolves to, and the apply that carried it
    out (None on --dry-run; no proposal when the profile already says it)."""

    profile: Path
    edit: Edit
    lock_id: str  # the profile's lock before the change
    proposal: Proposal | None = None
    dry_run: bool = False
    applied: ApplyResult | None = None

    @property
    def code(self) -> int:
        """A dry run that would change something exits 1, as `plan` does."""
        return EXIT_DRIFT if self.dry_run and self.proposal is not None else 0

    def to_json(self) -> dict[str, Any]:
        if self.proposal is None:
            return {"profile": str(self.profile), "changed": False, "lock_id": self.lock_id}
        generation = self.applied.done.current if self.applied else None
        return {
            **proposal_json(self.proposal),
            "dry_run": self.dry_run,
            "generation": generation,
        }


def change_of(
    profile_path: str,
    make_edit: Callable[[str], Edit],
    added: list[str],
    *,
    dry_run: bool,
    yes: bool,
    allow_torch_change: bool,
    as_json: bool,
) -> ChangeResult:
    """The one producer of add's and remove's result: propose the edit, show it, and carry
    it out only when allowed and confirmed."""
    profile = load_profile(profile_path)
    lock = load_fresh_lock(profile)  # a stale lock would mix old changes into the diff
    original = read_named(profile.path, "profile").decode()  # parsed as UTF-8 just now
    edit = make_edit(original)
    if edit.text == original:
        return ChangeResult(profile.path, edit, lock.short_hash)
    with ui.status(f"resolving {profile.path.name} with the change", quiet=as_json):
        proposal = propose(profile, lock, edit, added)
    say = shown(as_json)
    say.proposal(proposal)
    if proposal.torch_moves and not allow_torch_change:
        raise torch_refusal(proposal)
    if dry_run:
        return ChangeResult(profile.path, edit, lock.short_hash, proposal, dry_run=True)
    confirm(yes, proposal)
    applied = commit(proposal, original, say, as_json)
    return ChangeResult(profile.path, edit, lock.short_hash, proposal, applied=applied)


def render_text(result: ChangeResult) -> None:
    """add's or remove's result for people (the proposal itself was shown as it came)."""
    if result.proposal is None:
        for line in result.edit.kept:
            name = result.profile.name
            ui.out.print(f"[green]✓[/] nothing to change in {name}: {ui.escape(line)}")
    elif result.dry_run:
        ui.info("dry run: nothing written")
    elif result.applied is not None:
        render_applied(result.applied)


def confirm(yes: bool, proposal: Proposal) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        ui.error("refusing to act without confirmation: pass -y (stdin is not a terminal)")
        sys.exit(EXIT_USAGE)
    name = proposal.profile.path.name
    if not click.confirm(f"write {name} and its lock, and apply them?", err=True):
        ui.info("nothing changed")
        sys.exit(EXIT_DRIFT)


def commit(proposal: Proposal, original: str, say: Shown, as_json: bool) -> ApplyResult:
    """Profile, then lock (each atomically), then the same apply as `envlock apply -y`:
    a new generation, the one active now kept for `envlock rollback`."""
    path = proposal.profile.path
    if read_named(path, "profile").decode(errors="replace") != original:
        raise Refused(
            f"{path.name} changed while the change was being resolved",
            hint="run the command again; nothing was written",
        )
    redo = shlex.join(["envlock", *sys.argv[1:]])
    written = write_both(proposal, redo)
    say.written(proposal)

    # An apply that fails leaves the profile and lock as they were found, and says so. It
    # may have failed after its switch (verifying): `check` tells, `apply` returns.
    then = (
        f"`envlock check {shlex.quote(str(path))}` says whether the root still matches them; "
        f"once the cause is fixed, run `{redo}` again"
    )
    with undone_on_failure(written, "the apply", then):
        return converge_now(path, as_json)


def write_both(proposal: Proposal, redo: str) -> list[Written]:
    """Write the profile, then the lock (each atomically); what each held before. A lock
    that cannot be written puts the profile back."""
    path, lock_path = proposal.profile.path, proposal.candidate.path
    mode = path.stat().st_mode & 0o777
    lock_before = read_named(lock_path, "lock") if lock_path.exists() else None
    written = [
        Written(path, read_named(path, "profile"), proposal.edit.text.encode(), mode),
        Written(lock_path, lock_before, proposal.candidate.text.encode()),
    ]
    with undone_on_failure(written, "writing the lock", f"once fixed, run `{redo}` again"):
        # One change across a crash: the pair is recorded first (envlock/base/pairs.py).
        write_together([(item.path, item.after, item.mode) for item in written], redo)
    return written


def converge_now(path: Path, as_json: bool) -> ApplyResult:
    """The converge `envlock apply -y` runs, on the profile just written (its plan and
    progress shown as apply shows them; its result rendered with add's or remove's)."""
    # Here: dry runs never pay for these imports.
    from envlock.commands.apply import apply_of, make_gate
    from envlock.commands.common import progress_printer
    from envlock.reconcile.context import open_context

    started = time.perf_counter()
    ctx = open_context(path)
    return apply_of(
        ctx,
        started=started,
        snapshot_dir=None,
        progress=progress_printer(as_json),
        gate=make_gate(ctx, yes=True, as_json=as_json),
    )


def render_applied(result: ApplyResult) -> None:
    from envlock.commands.apply import render_text as render_apply

    render_apply(result)


# -- showing ------------------------------------------------------------------------------
def show_written(proposal: Proposal) -> None:
    path = proposal.profile.path
    ui.out.print(f"[green]✓[/] wrote {ui.escape(path.name)} and {proposal.candidate.path.name}")
    if not proposal.installs_differently:
        ui.info("the lock installs the same packages: no new generation is needed")


def proposal_json(proposal: Proposal) -> dict[str, object]:
    """What the change does, for scripts: the profile's lines, the lock's ids and packages."""
    changes = proposal.changes
    moved = (*changes.torch, *changes.cuda, *changes.packages)
    return {
        "profile": str(proposal.profile.path),
        "changed": True,
        "profile_changes": profile_lines(proposal.edit),
        "lock_id_before": proposal.lock.short_hash,
        "lock_id": proposal.candidate.short_hash,
        "packages": [{"name": c.key, "kind": c.kind, "before": c.a, "after": c.b} for c in moved],
        "torch_moves": list(proposal.torch_moves),
        "notes": list(proposal.notes),
    }


def show(proposal: Proposal) -> None:
    changes = proposal.changes
    before, after = proposal.lock.short_hash, proposal.candidate.short_hash
    summary = "installs the same packages" if before == after else f"lock {before} → {after}"
    ui.out.print(f"[bold]{ui.escape(proposal.profile.path.name)}[/]: {summary}")
    for line in profile_lines(proposal.edit):
        ui.out.print(f"  {ui.escape(line)}")
    for note in proposal.notes:
        ui.out.print(f"  [yellow]note:[/] {ui.escape(note)}")
    show_torch(proposal)
    if changes.empty:
        ui.out.print("no package is added, removed or moved to another version")
    show_group("CUDA libraries", changes.cuda, changes)
    for kind in ("added", "changed", "removed"):
        show_group(f"packages {kind}", changes.of_kind(kind), changes)
    total = sum(n for name, n in changes.sizes if name in downloaded(changes))
    if total:
        ui.out.print(f"\n  to download: {ui.size(total)}")


def profile_lines(edit: Edit) -> list[str]:
    """Each entry the edit adds (+), replaces (~ old → new) or removes (-), then each one
    asked for that stays as listed (=)."""
    lines = [f"{sign(edit, r)} [dependencies] packages: {r}" for r in edit.dependencies]
    lines += [f"{sign(edit, r)} [torch] packages: {r}" for r in edit.torch_packages]
    return lines + [f"= {line}" for line in edit.kept]


def sign(edit: Edit, line: str) -> str:
    if edit.removing:
        return "-"
    return "~" if " → " in line else "+"


def show_torch(proposal: Proposal) -> None:
    if not proposal.changes.torch:
        torch = proposal.candidate.packages.get("torch")
        if torch is not None:
            ui.out.print(f"\n[bold]torch build[/]: unchanged (torch {ui.escape(torch.version)})")
        return
    show_group("torch build", proposal.changes.torch, proposal.changes)


def show_group(title: str, changes: tuple[Change, ...], all_changes: LockChanges) -> None:
    if not changes:
        return
    ui.out.print(f"\n[bold]{title}[/]")
    for change in changes:
        ui.out.print("  " + change_line(change, all_changes.size_of(change.key)))


def change_line(change: Change, size: int | None) -> str:
    key = ui.escape(change.key)
    sized = f" [dim]({ui.size(size)})[/]" if size else ""
    if change.kind == "added":
        return f"[green]+ {key} {ui.escape(str(change.b))}[/]{sized}"
    if change.kind == "removed":
        return f"[red]- {key} {ui.escape(str(change.a))}[/]{sized}"
    return f"  {key} {ui.escape(str(change.a))} → {ui.escape(str(change.b))}{sized}"


def downloaded(changes: LockChanges) -> set[str]:
    """Packages the new lock brings (added or at another version)."""
    return {c.key for c in (*changes.cuda, *changes.packages) if c.kind != "removed"}
