"""What a checkpoint holds, as the stable `envlock inspect --json` document (schema 1).

`summary()` turns a `CheckpointReport` (see report.py) into counts per section, prefix and
dtype (tally.py), the largest tensors, shared storages, training progress, the run's config and
a bounded sketch of the object tree (navigated with tree.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from fnmatch import fnmatchcase
from itertools import islice
from math import isfinite
from typing import Any

from envlock.base.limits import MAX_JSON_ENTRIES, MAX_TEXT, Refused
from envlock.base.secrets import redact_config, redact_value
from envlock.checkpoint import weights
from envlock.checkpoint.digest import Digester, cut
from envlock.checkpoint.fold import Fold
from envlock.checkpoint.inert import DType, Stub, TensorInfo, is_stub_class
from envlock.checkpoint.report import CheckpointReport
from envlock.checkpoint.tally import Tally, is_state_dict
from envlock.checkpoint.tree import (
    TensorEntry,
    child_count,
    children,
    is_container,
    is_optimizer,
    key_text,
)
from envlock.checkpoint.unpickler import suspicious
from envlock.schema import DOCUMENTS

SCHEMA = DOCUMENTS["inspect"]
_CONFIG_NAME = re.compile(r"^(.*[_-])?(config|cfg|args|hparams|hyper_?parameters|hyperparams)$")
# How far a run got, as each library names it: nanoGPT's iter_num, Megatron's iteration,
# fairseq's num_updates.
_PROGRESS = ("step", "epoch", "global_step", "iter_num", "iteration", "num_updates")
# A config past these is shown cut, with the sha256 of all of it (digest.py): a diff compares
# a cut by it, and shows the indices and keys of a change only below them.
_MAX_PLAIN = 250_000  # objects of a config rendered as JSON ...
_MAX_PLAIN_CHARS = 16_000_000  # ... and characters of its strings
_MAX_VALUE = 10 * MAX_TEXT  # characters of one config string (a command line, a prompt)
_MAX_STATE = 4 * _MAX_PLAIN  # objects rendered for all of a file's training state
_TOP = 5
# What a config entry may be: a dict, an object (argparse's Namespace), or a dict folded as it
# was read (fold.py: a config past FOLD_AT keys).
_CONFIG_TYPES = (dict, Stub, Fold)


class _Budget:
    """Shared references can make a small pickle a huge tree: cap the nodes a walk may visit
    and the characters of the strings it copies out."""

    def __init__(
        self, limit: int, chars: int = _MAX_PLAIN_CHARS, digester: Digester | None = None
    ) -> None:
        self.left, self.chars = limit, chars
        self._state_dicts: dict[int, bool] = {}
        # What is cut carries the digest of the whole value; shared, each object once.
        self.digester = digester or Digester()

    def cut(self, obj: Any, what: str) -> str:
        """`obj` past the budget: what it was and the sha256 of all of it (digest.py)."""
        return cut(what, self.digester.hex(obj))

    def spend(self, objects: int = 1) -> bool:
        self.left -= objects
        return self.left >= 0

    def text(self, value: str) -> str:
        if len(value) > _MAX_VALUE:  # a property of the string: cut alike on every side
            digest = self.digester.hex(value)
            value = f"{value[:_MAX_VALUE]}…(+{len(value) - _MAX_VALUE:,} chars; sha256:{digest})"
        self.chars -= len(value)
        if self.chars < 0:
            raise _Exhausted
        return value

    def is_state_dict(self, obj: Any) -> bool:
        if id(obj) not in self._state_dicts:  # memoized: a shared dict is checked once
            self._state_dicts[id(obj)] = is_state_dict(obj)
        return self._state_dicts[id(obj)]


# --- the document -------------------------------------------------------------------------------


def summary(report: CheckpointReport, pattern: str | None = None) -> dict[str, Any]:
    """The `--json` document of `report`; `pattern` selects the tensor keys to detail."""
    entries = report.tensors()

    tensor_bytes = weights.reader(report)  # the few tensor bytes a report reads, once each

    def shape_of(t: TensorInfo) -> tuple[int | None, ...]:
        return weights.nested_shape(tensor_bytes, t)  # its regular dims, from its sizes

    tally = Tally(report.root, entries, dict(report.kinds))
    for entry in entries:
        tally.add(entry)
    stubbed = list(report.stubbed)
    # Key order is part of the output people read: keep it stable.
    return {
        "schema": SCHEMA,
        "path": report.path,
        "format": report.format,
        "files": [{"path": f.path, "format": f.format, "size": f.size} for f in report.files],
        "size": _size(sum(f.size for f in report.files), tally),
        "tensors": tally.totals(len(entries)),
        "sections": tally.section_rows(),
        "first": [_row(e, shape_of) for e in entries[:_TOP]],
        "largest": _largest(tally, shape_of),
        "shared_storage": tally.shared_storage(),
        "progress": progress(
            report.root, dict(report.kinds), lambda t: weights.scalar(tensor_bytes, t)
        ),
        "config": with_metadata(config(report.root, report.format == "directory"), report),
        "structure": _node(report.root, (), _subtree_counts(entries), 0, _Budget(2000)),
        "stubbed_globals": stubbed,
        "suspicious_globals": suspicious(stubbed),
        "notes": [*report.notes, *tally.notes(), *_sharded(entries)],
        "pattern": pattern,
        "keys": None
        if pattern is None
        else [
            _row(e, shape_of)
            for e in entries
            if key_matches(e, pattern, report.format == "directory")
        ],
    }


def bounded_lists(document: dict[str, Any]) -> dict[str, Any]:
    """`document` with every list cut to MAX_JSON_ENTRIES, each cut named in its notes: the
    output's size is bounded whatever the checkpoint lists (keys of a shared storage, ...)."""
    cuts: list[str] = []
    bounded = _bounded(document, "", cuts)
    bounded["notes"] = [*bounded["notes"], *cuts]
    return bounded


def _bounded(value: Any, where: str, cuts: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: _bounded(v, f"{where}.{k}" if where else k, cuts) for k, v in value.items()}
    if not isinstance(value, list):
        return value
    if len(value) > MAX_JSON_ENTRIES:
        cuts.append(
            f"{where}: {MAX_JSON_ENTRIES:,} of {len(value):,} entries shown "
            f"(lists are cut at {MAX_JSON_ENTRIES:,})"
        )
        value = value[:MAX_JSON_ENTRIES]
    return [_bounded(v, f"{where}[]", cuts) for v in value]


def key_matches(entry: TensorEntry, pattern: str, directory: bool) -> bool:
    """A directory's keys start with the member's file name (`model.safetensors.…`): a
    pattern matches with or without it, so `model.layers.0.*` finds the layer."""
    if fnmatchcase(entry.key, pattern):
        return True
    return directory and len(entry.path) > 1 and fnmatchcase(".".join(entry.path[1:]), pattern)


def _row(entry: TensorEntry, shape_of: Callable[[TensorInfo], tuple] | None = None) -> dict:
    t = entry.info
    row = {
        "key": key_text(entry.key),
        "dtype": t.dtype,
        "shape": list(shape_of(t) if shape_of else t.shape),
        "numel": t.numel,
        "bytes": t.nbytes,
        "layout": t.layout,
    }
    if t.qscheme:
        row["qscheme"] = t.qscheme
    if t.sharding:  # one rank's shard of a DTensor: shape, numel and bytes are the local ones
        row["sharding"] = t.sharding
    if t.parts:  # what a sparse, nested or per-channel quantized tensor is stored as
        row["parts"] = [
            {"name": name, "dtype": p.dtype, "shape": list(p.shape), "bytes": p.nbytes}
            for name, p in t.parts
        ]
    return row


def _sharded(entries: list[TensorEntry]) -> list[str]:
    sharded = [e.info.sharding for e in entries if e.info.sharding]
    if not sharded:
        return []
    ranks = sorted({m.group(1) for t in sharded if (m := _RANKS.search(t))}, key=int)
    part = f"1/{ranks[0]}" if len(ranks) == 1 else "1/N"
    over = f"{' or '.join(ranks)} ranks" if ranks else "a mesh"
    return [
        f"{len(sharded)} DTensor(s) saved by one rank (FSDP2 or tensor parallel): this file "
        f"holds that rank's local shards ({part} of each tensor, sharded over {over}); shapes, "
        f"elements and bytes are the local ones, e.g. {sharded[0]}"
    ]


_RANKS = re.compile(r" over (\d+) rank")


def _size(total: int, tally: Tally) -> dict[str, int]:
    tensor_bytes = sum(s.nbytes for s in tally.storages.values())
    return {"total_bytes": total, "tensor_bytes": tensor_bytes, "other_bytes": total - tensor_bytes}


def _largest(tally: Tally, shape_of: Callable[[TensorInfo], tuple]) -> list[dict[str, Any]]:
    unique = sorted(tally.unique.values(), key=lambda e: -e.info.numel)
    return [_row(e, shape_of) for e in unique[:_TOP]]


# --- the structure sketch -----------------------------------------------------------------------


def _subtree_counts(entries: list[TensorEntry]) -> Counter[tuple[str, ...]]:
    # `_node` sketches only the top levels, so only short key-path prefixes need a count.
    counts: Counter[tuple[str, ...]] = Counter()
    for e in entries:
        for i in range(min(len(e.path), 5) + 1):
            counts[e.path[:i]] += 1
    return counts


def _node(
    obj: Any, path: tuple[str, ...], counts: Counter[tuple[str, ...]], depth: int, budget: _Budget
) -> dict[str, Any]:
    if isinstance(obj, TensorInfo):
        return {"type": "tensor", "dtype": obj.dtype, "shape": list(obj.shape), **_kind(obj)}
    short = isinstance(obj, list | tuple) and len(obj) <= 8 and not counts.get(path, 0)
    if not is_container(obj) or (short and not any(is_container(v) for v in obj)):
        return _leaf(obj)
    name = obj.global_name() if isinstance(obj, Stub) else type(obj).__name__
    node: dict[str, Any] = {"type": name, "len": child_count(obj), "tensors": counts.get(path, 0)}
    if budget.is_state_dict(obj):
        node["state_dict"] = True  # its keys are listed as tensors already
    elif depth < 4 and budget.spend():
        shown = list(islice(children(obj), 20))
        node["children"] = {
            k: _named(k, _node(v, (*path, k), counts, depth + 1, budget)) for k, v in shown
        }
        node["more"] = node["len"] - len(shown)
    return node


def _kind(t: TensorInfo) -> dict[str, str]:
    # A tensor other than a plain strided one: its layout and quantization scheme.
    kind = {} if t.layout == "strided" else {"layout": t.layout}
    return {**kind, "qscheme": t.qscheme} if t.qscheme else kind


def _named(key: str, node: dict[str, Any]) -> dict[str, Any]:
    """A sketched child as it may be shown: a secret-named leaf's value redacted."""
    if node["type"] != "global" and "value" in node and node.get("value") is not None:
        return dict(node, value=redact_value(key, node["value"]))
    return node


def _leaf(obj: Any) -> dict[str, Any]:
    if is_stub_class(obj):
        return {"type": "global", "value": obj.global_name()}
    if isinstance(obj, Fold):  # its own type, folded as it was read: its count and digest
        return {"type": obj.kind, "value": obj.text()}
    # The secrets inside a string go before it is cut, or a cut URL would keep its password.
    value = redact_config(_whole(obj, _Budget(1000)))
    if isinstance(value, str) and len(value) > 80:
        value = value[:77] + "..."
    return {"type": type(obj).__name__, "value": value}


def plain(obj: Any) -> Any:
    """A JSON-able rendering of an inert value, within the config walk's budget."""
    return _whole(obj, _Budget(_MAX_PLAIN))


class _Exhausted(Exception):
    """The budget ran out inside a value: the whole value is cut, never part of it."""


def _whole(obj: Any, budget: _Budget) -> Any:
    """`obj` rendered whole, or, past the budget anywhere inside, cut as one value with the
    digest of all of it. Never cut part-way: where a budget runs out depends on everything
    rendered before, so two values alike but for one element early on would be cut at
    different places and differ everywhere after it."""
    try:
        return _plain(obj, budget)
    except _Exhausted:
        if isinstance(obj, str):
            return budget.cut(obj, f"a string of {len(obj):,} chars")
        return budget.cut(obj, f"{_what(obj)} of {_items(obj)}{_largest_inside(obj)}")


def _largest_inside(obj: Any) -> str:
    """` (train_files: list of 300,000 items)`: what made a small dict pass the budget."""
    if not isinstance(obj, dict) or len(obj) > 64:
        return ""
    big = sorted(obj.items(), key=lambda kv: -_children_count(kv[1]))[:2]
    said = [f"{key_text(k)}: {_what(v)} of {_items(v)}" for k, v in big if _children_count(v)]
    return f" ({', '.join(said)})" if said else ""


def _items(obj: Any) -> str:
    count = _children_count(obj)
    return f"{count:,} item" if count == 1 else f"{count:,} items"


def _what(obj: Any) -> str:
    return obj.global_name() if isinstance(obj, Stub) else type(obj).__name__


def _plain(obj: Any, budget: _Budget, depth: int = 0) -> Any:
    """A JSON-able rendering of an inert value: objects become dicts with their class name."""
    leaf = _plain_leaf(obj, budget)
    if leaf is not _BRANCH:
        return leaf
    # Charged before looking inside: one shared list may be reached a thousand times.
    if depth > 20:  # a property of the value itself: cut here, alike on every side
        return budget.cut(obj, f"{_what(obj)} of {_items(obj)}")
    if not budget.spend(1 + _children_count(obj)):
        raise _Exhausted
    if isinstance(obj, dict):
        return {key_text(k): _plain(v, budget, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_plain(v, budget, depth + 1) for v in obj]
    if isinstance(obj, Stub):
        return _plain_stub(obj, budget, depth)
    return str(obj) if isinstance(obj, complex) else f"<{type(obj).__name__}>"


_BRANCH = object()  # what _plain_leaf answers for a value it does not render whole


def _plain_leaf(obj: Any, budget: _Budget) -> Any:
    """A value rendered whole (a number, a text, a tensor's description), or _BRANCH."""
    if obj is None or isinstance(obj, bool):
        return obj
    if isinstance(obj, int):  # JSON and str() choke on ints of thousands of digits
        return obj if obj.bit_length() <= 128 else budget.cut(obj, f"a {obj.bit_length()}-bit int")
    if isinstance(obj, str):
        return budget.text(obj)
    if isinstance(obj, float):
        return obj if isfinite(obj) else str(obj)  # JSON has no NaN or Infinity
    if isinstance(obj, TensorInfo):
        kind = "".join(f", {v}" for v in _kind(obj).values())
        return f"tensor({obj.dtype}, {list(obj.shape)}{kind})"
    if isinstance(obj, DType):
        return f"torch.{obj.name}"
    if isinstance(obj, bytes | bytearray):
        return budget.cut(obj, f"{len(obj):,} bytes")
    if is_stub_class(obj):
        return f"<global {obj.global_name()}>"
    if isinstance(obj, Fold):  # a container folded as it was read: cut, with its digest
        return obj.text()
    return _BRANCH


def _children_count(obj: Any) -> int:
    return len(obj) if isinstance(obj, set | frozenset) else child_count(obj)


def _plain_stub(obj: Stub, budget: _Budget, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {"__class__": obj.global_name()}
    fields = obj.fields()
    if (obj.args or obj.kwargs or (fields is None and obj.state is not None)) and budget.spend(
        len(obj.args) + len(obj.kwargs)
    ):
        out["args"] = _plain([*obj.args, *obj.kwargs.items()], budget, depth + 1)
    if fields is None and obj.state is not None:
        out["state"] = _plain(obj.state, budget, depth + 1)
    out.update(_plain(fields or {}, budget, depth + 1))
    if obj.items or obj.listitems:
        out["items"] = _plain(obj.items or obj.listitems, budget, depth + 1)
    return out


# --- config and progress ------------------------------------------------------------------------


def config(root: Any, directory: bool) -> dict[str, Any] | None:
    """The run's config/args/hparams entries of `root` as plain JSON-able values, or None.

    A directory's root is keyed by file name, so each member is searched one level down.
    """
    if not isinstance(root, dict):
        return None
    found: dict[str, Any] = {}
    for key, value in root.items():
        name = key_text(key)
        if directory:
            stem = name.split(".")[0]
            if _CONFIG_NAME.match(stem) and isinstance(value, _CONFIG_TYPES):
                found[name] = _whole(value, _Budget(_MAX_PLAIN))
            nested = config(value, False)
            found.update({f"{name}:{k}": v for k, v in (nested or {}).items()})
        elif _CONFIG_NAME.match(name.lower()) and isinstance(value, _CONFIG_TYPES):
            found[name] = _whole(value, _Budget(_MAX_PLAIN))
    # A run's args may hold a token: `inspect` and `diff` (of a file or of its directory) both
    # read the config here, so they show one answer.
    return redact_config(found) or None


def training_state(root: Any) -> dict[str, Any]:
    """The entries of a checkpoint file's top-level dict that no other reading compares, as
    plain values: Lightning's `loops`, `callbacks`, `lr_schedulers` and
    `pytorch-lightning_version`, a run's `best_val_loss`. What is read elsewhere is left out:
    weights (a tensor, a state dict, a pickled module: structure), optimizers, the config
    (config()), numbers under a progress name (progress())."""
    if not isinstance(root, dict):
        return {}
    found: dict[str, Any] = {}
    digester, spent = Digester(), 0
    for key, value in root.items():
        name = key_text(key)
        if _read_elsewhere(name, value):
            continue
        budget = _Budget(_MAX_PLAIN, digester=digester)
        found[name] = _whole(value, budget)
        spent += _MAX_PLAIN - max(budget.left, 0)
        if spent > _MAX_STATE:  # entries that share one big value, each rendering it again
            raise Refused(
                "rendering the checkpoint's training state (entries repeating shared values)",
                f"{_MAX_STATE:,} objects",
            )
    return redact_config(found)


def _read_elsewhere(name: str, value: Any) -> bool:
    if name.lower() in _PROGRESS and _is_number(value):
        return True
    if _CONFIG_NAME.match(name.lower()) and isinstance(value, _CONFIG_TYPES):
        return True
    return isinstance(value, TensorInfo) or _holds_weights(value, 3)


def _holds_weights(value: Any, depth: int) -> bool:
    """A state dict, optimizer or pickled module, here or a few levels down (a list of
    optimizers, `{"model": state_dict}`): what structure and the optimizer's groups read. A
    lone tensor among other values (a callback's best score) is state: shown as its dtype and
    shape, its values compared under --weights."""
    if is_state_dict(value) or is_optimizer(value):
        return True
    if isinstance(value, Stub) and "_parameters" in (value.fields() or {}):
        return True
    if depth == 0 or not isinstance(value, dict | list | tuple):
        return False
    items = value.values() if isinstance(value, dict) else value
    return any(_holds_weights(v, depth - 1) for v in islice(items, 64))


def with_metadata(found: dict[str, Any] | None, report: CheckpointReport) -> dict[str, Any] | None:
    """The config with each safetensors file's `__metadata__` (a LoRA's training settings),
    as `__metadata__` of a file, `<member>:__metadata__` of a directory's member."""
    if not report.metadata:
        return found
    directory = report.format == "directory"
    # "format": "pt" is the library's marker of the tensors' framework, not a setting.
    extra = {
        f"{name}:__metadata__" if directory else "__metadata__": kept
        for name, meta in report.metadata
        if (kept := {k: v for k, v in meta if k != "format"})
    }
    if not extra:
        return found
    return {**(found or {}), **redact_config(extra)}


_MAX_SCALAR_READS = 16  # 0-d progress tensors read per checkpoint (a real one has one or two)


def progress(
    root: Any,
    kinds: dict[str, str] | None = None,
    value_of: Callable[[TensorInfo], int | float | None] | None = None,
) -> dict[str, Any]:
    """step, epoch, ... of the run, numbers or 0-d tensors (`torch.tensor(5)`, read by
    `value_of`). A directory's RNG members are skipped: accelerate's `random_states_N.pkl`
    keeps its own gradient-accumulation `step`, 0 after any number of optimizer steps."""
    found: dict[str, Any] = {}
    rng = {k for k, kind in (kinds or {}).items() if kind == "rng"}
    if rng and isinstance(root, dict):
        root = {k: v for k, v in root.items() if k not in rng}
    level, seen, reads = [root], set(), 0
    for _ in range(3):  # breadth first, so the shallowest value wins
        nxt = []
        for obj in level:
            # An optimizer's "step" counts its updates, not the run's: never look inside.
            if id(obj) in seen or is_optimizer(obj) or is_state_dict(obj):
                continue
            seen.add(id(obj))
            for key, value in children(obj):
                name = key.lower()
                if name in _PROGRESS and name not in found and isinstance(value, TensorInfo):
                    # A 0-d tensor's number (a few bytes read), for a few keys at most.
                    reads += 1
                    value = value_of(value) if value_of and reads <= _MAX_SCALAR_READS else None
                if key.lower() in _PROGRESS and _is_number(value):
                    found.setdefault(key.lower(), value)
                elif is_container(value):
                    nxt.append(value)
        level = nxt
    return found


def _is_number(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return value.bit_length() <= 64 if isinstance(value, int) else isfinite(value)
