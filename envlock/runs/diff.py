"""Diff: what changed between two runs, grouped, most consequential first.

Each side is described once (describe.py: the environment, the checkpoint `inspect` reads,
its configuration from every source, its progress, what could not be read); comparing is
pure and generic: `compare(a, b)` over two descriptions, a value on one side only shown as
such, each value reported once. `incomplete(a, b)` says what neither comparison could see.
"""

from __future__ import annotations

from typing import Any

from envlock import ui
from envlock.base.cuda import is_cuda_library
from envlock.runs.describe import Side, flatten, load_side
from envlock.runs.diff_data import with_metrics_and_data
from envlock.runs.diff_types import Change, Group, RecordedCache

__all__ = ["Change", "Group", "Side", "compare", "flatten", "incomplete", "load_side"]


# -- comparing ----------------------------------------------------------------------------
def mapping_changes(
    a: dict[str, Any], b: dict[str, Any], *, ordered: bool = False
) -> tuple[Change, ...]:
    """What differs between two flat mappings: changed values, and keys one side lacks
    (a key on one side only is a difference even when its value is null)."""
    keys = list(dict.fromkeys([*a, *b])) if ordered else sorted(set(a) | set(b))
    return tuple(key_change(k, a, b) for k in keys if k not in a or k not in b or a[k] != b[k])


def key_change(key: str, a: dict[str, Any], b: dict[str, Any]) -> Change:
    only_in = "b" if key not in a else "a" if key not in b else ""
    return Change(key, a.get(key), b.get(key), only_in)


def known_to_both(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict, dict]:
    """Drop what one side cannot know (a lock has no observed CUDA or cuDNN)."""
    keys = {k for k in a if a[k] is not None} & {k for k in b if b[k] is not None}
    keys |= {k for k in ("torch",) if k in a or k in b}
    return {k: v for k, v in a.items() if k in keys}, {k: v for k, v in b.items() if k in keys}


def warmth(cache: RecordedCache | None) -> str | None:
    if cache is None:
        return None
    if not cache.exists or not cache.files:
        return "cold"
    return f"warm ({ui.size(cache.bytes)})"


def cache_group(a: Side, b: Side, *, torch_changed: bool) -> Group:
    ca, cb = a.cache(), b.cache()
    changes = []
    fa = ca.fingerprint if ca else None
    fb = cb.fingerprint if cb else None
    if fa != fb and not torch_changed:  # a new torch build implies a new fingerprint
        changes.append(Change("fingerprint", fa, fb))
    wa, wb = warmth(ca), warmth(cb)
    if wa != wb:
        changes.append(Change("compile cache", wa, wb))
    return Group("compile cache", tuple(changes))


def compare(a: Side, b: Side) -> list[Group]:
    """Grouped differences, most consequential first; empty groups dropped."""
    torch_a, torch_b = a.torch(), b.torch()
    if a.snapshot is None or b.snapshot is None:
        torch_a, torch_b = known_to_both(torch_a, torch_b)
    # torch and its nvidia-*-cuXX libraries are reported together, as the torch build.
    pkgs_a = {k: v for k, v in a.packages().items() if k != "torch" and not is_cuda_library(k)}
    pkgs_b = {k: v for k, v in b.packages().items() if k != "torch" and not is_cuda_library(k)}
    groups = [
        Group("torch build", mapping_changes(torch_a, torch_b, ordered=True)),
        Group("packages", mapping_changes(pkgs_a, pkgs_b)),
        Group("scripts", mapping_changes(short(a.scripts()), short(b.scripts()))),
    ]
    if a.is_run and b.is_run:  # a lock has no config, weights or progress: nothing to compare
        groups += [
            structure_group(a, b),
            weights_group(a, b),
            Group("hyperparameters", once(mapping_changes(a.config(), b.config()))),
            Group("progress", mapping_changes(progress_of(a), progress_of(b))),
            Group("training state", mapping_changes(a.state(), b.state()), STATE_NOTE),
        ]
    if a.file_digests is not None or b.file_digests is not None:
        fa, fb = short(dict(a.file_digests or {})), short(dict(b.file_digests or {}))
        groups.append(Group("other files", mapping_changes(fa, fb), OTHER_FILES_NOTE))
    if a.paths() and b.paths():
        # Every two runs write to different places: shown, never a difference by itself.
        changes = mapping_changes(a.paths(), b.paths())
        groups.append(Group("run paths", changes, RUN_PATHS_NOTE, counted=False))
    if a.snapshot is not None and b.snapshot is not None:
        # Observed facts exist only in snapshots; a lock side has none to compare.
        groups += [
            Group("environment variables", mapping_changes(env_of(a), env_of(b))),
            cache_group(a, b, torch_changed=torch_a != torch_b),
            Group("hardware and driver", mapping_changes(a.hardware(), b.hardware())),
        ]
    # What the runs measured (first) and read: diff_data.py.
    return [g for g in with_metrics_and_data(a, b, groups) if g.changes]


def structure_group(a: Side, b: Side) -> Group:
    """Tensor keys added or removed, dtype or shape changed, and the parameter count: what
    the weights are, apart from what the run was told."""
    ca, cb = a.checkpoint, b.checkpoint
    if ca is None or cb is None:
        if ca is cb or a.unread or b.unread:  # none on either side, or unread: said apart
            return Group("structure")
        one = ca or cb
        assert one is not None
        text = f"{one.path} ({len(one.tensors):,} tensors)"
        if ca is not None:
            return Group("structure", (Change("checkpoint", text, None, "a"),))
        return Group("structure", (Change("checkpoint", None, text, "b"),))
    changes = mapping_changes(ca.tensors, cb.tensors, ordered=True)
    if ca.params != cb.params:
        changes = (Change("parameters", ca.params, cb.params), *changes)
    if ca.shared != cb.shared:  # tied vs untied: said, not only a parameter count
        tied = mapping_changes(ca.shared, cb.shared, ordered=True)
        changes += tuple(Change(f"{c.key} shares storage with", c.a, c.b, c.only_in) for c in tied)
    return Group("structure", changes, STRUCTURE_NOTE)


STRUCTURE_NOTE = "tensor keys with dtype [shape], and the parameter count"
WEIGHTS_SHOWN = 20  # keys named of the tensors whose contents differ; the rest counted


def weights_group(a: Side, b: Side) -> Group:
    """Tensors present on both sides whose contents differ (diff --weights): a sha256 of
    each tensor's bytes, streamed; the first WEIGHTS_SHOWN keys named, all counted."""
    da = a.checkpoint.digests if a.checkpoint else None
    db = b.checkpoint.digests if b.checkpoint else None
    if da is None or db is None:
        return Group("weights")  # not asked for, or no checkpoint on one side
    differ = [k for k in da if k in db and da[k] != db[k]]
    compared = sum(1 for k in da if k in db)
    shown = tuple(Change(k, da[k][:16], db[k][:16]) for k in differ[:WEIGHTS_SHOWN])
    note = f"{len(differ):,} of {compared:,} tensors on both sides differ in contents (sha256)"
    if len(differ) > WEIGHTS_SHOWN:
        note += f"; the first {WEIGHTS_SHOWN} named"
    return Group("weights", shown, note)


def progress_of(side: Side) -> dict[str, Any]:
    return dict(side.checkpoint.progress) if side.checkpoint else {}


def once(changes: tuple[Change, ...]) -> tuple[Change, ...]:
    """Each value reported once: a checkpoint's config value, or a run file's field, that
    changed exactly as the snapshot's config value of the same name (`checkpoint.args.lr`
    beside `run.lr`; `training_args.bin: learning_rate` beside a trainer callback's
    `run.training_args.learning_rate`) is the same setting, recorded twice by the run:
    named under `also`, not counted again."""
    twins = run_twins(changes)
    kept: list[Change] = []
    folded: dict[str, list[str]] = {}
    for change in changes:
        twin = None if change.key.startswith("run.") else twins.get(leaf_of(change.key))
        if twin is not None and (twin.a, twin.b, twin.only_in) == (
            change.a,
            change.b,
            change.only_in,
        ):
            folded.setdefault(twin.key, []).append(change.key)
            continue
        kept.append(change)
    return tuple(Change(c.key, c.a, c.b, c.only_in, tuple(folded.get(c.key, ()))) for c in kept)


def run_twins(changes: tuple[Change, ...]) -> dict[str, Change]:
    """The snapshot config's changes by name: their whole key after `run.`, and the last
    part of it where no other change of the run's shares that last part."""
    run = [c for c in changes if c.key.startswith("run.")]
    leaves: dict[str, list[Change]] = {}
    for change in run:
        leaves.setdefault(change.key.rsplit(".", 1)[-1], []).append(change)
    twins = {leaf: found[0] for leaf, found in leaves.items() if len(found) == 1}
    twins.update((c.key.removeprefix("run."), c) for c in run)
    return twins


def leaf_of(key: str) -> str:
    """A checkpoint's config key (`checkpoint.args.lr`) or a run file's field
    (`training_args.bin: learning_rate`) by its last part; anything else by no name."""
    if key.startswith("checkpoint."):
        return key.rsplit(".", 1)[-1]
    name, colon, field = key.partition(": ")
    return field.rsplit(".", 1)[-1] if colon and name else ""


def incomplete(a: Side, b: Side) -> list[str]:
    """What could not be read on either side: the comparison is incomplete, never "no
    differences"."""
    return [f"A: {u}" for u in a.unread] + [f"B: {u}" for u in b.unread]


STATE_NOTE = (
    "what else the checkpoint keeps (loops, callbacks, schedulers); tensors by dtype [shape]"
)
OTHER_FILES_NOTE = "files no reader parses, compared by the sha256 of their bytes"
RUN_PATHS_NOTE = "where each run wrote its files, not how it trained: not counted"


# Set by envlock run from the build fingerprint: reported under "compile cache" instead.
MANAGED_ENV = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def env_of(side: Side) -> dict[str, Any]:
    return {k: v for k, v in side.record.env.items() if k not in MANAGED_ENV}


def short(hashes: dict[str, str | None]) -> dict[str, str | None]:
    """Hashes cut for people; a script recorded without one (null) stays so."""
    return {k: v[:12] if v is not None else None for k, v in hashes.items()}
