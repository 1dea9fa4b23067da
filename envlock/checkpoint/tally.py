"""Counting a checkpoint's tensors: per section, prefix and dtype, parameters apart from
optimizer, RNG and other state, each storage's bytes once and each element once however many
keys and views name it (regions.py)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from envlock.base.limits import MAX_VIEW_RUNS
from envlock.checkpoint.inert import Storage, Stub, TensorInfo
from envlock.checkpoint.regions import Regions, distinct
from envlock.checkpoint.tree import TensorEntry


def is_state_dict(obj: Any) -> bool:
    values = obj.values() if isinstance(obj, dict) else ()
    return bool(values) and all(isinstance(v, TensorInfo) for v in values)


class Tally:
    """Counts per section, prefix and dtype; a tensor named by several keys counts once."""

    def __init__(
        self, root: Any, entries: list[TensorEntry], kinds: dict[str, str] | None = None
    ) -> None:
        self.root = root
        # Storages that several distinct tensors view: only theirs need regions kept.
        views = Counter(
            (e.info.storage.file, e.info.storage.key)
            for e in {e.info.alias: e for e in entries}.values()
            if e.info.storage
        )
        self.viewed = {sid for sid, n in views.items() if n > 1}
        self.kinds = kinds or {}
        self.state = {"optimizer": 0, "rng": 0, "other": 0, "duplicate": 0}
        self.regions = Regions(MAX_VIEW_RUNS)
        self.unique: dict[tuple[object, ...], TensorEntry] = {}
        self.storages: dict[tuple[str, str], Storage] = {}
        self.users: dict[tuple[str, str], list[str]] = {}
        self.sections: dict[str, dict[str, Any]] = {}
        self.dtypes: dict[str, dict[str, int]] = {}
        self.numel = self.params = 0

    def add(self, e: TensorEntry) -> None:
        t = e.info
        if e.section not in self.sections:
            self.sections[e.section] = _section(e.section, self.root)
            kind = self.kinds.get(e.section)
            if kind:
                self.sections[e.section]["kind"] = kind.partition(":")[0]
        sec = self.sections[e.section]
        pre = sec["prefixes"].setdefault(e.prefix, {"prefix": e.prefix, "tensors": 0, "numel": 0})
        dt = self.dtypes.setdefault(t.dtype, {"count": 0, "numel": 0, "bytes": 0})
        sec["dtypes"][t.dtype] = sec["dtypes"].get(t.dtype, 0) + 1
        if e.optimizer and sec["kind"] != "duplicate":
            sec["kind"] = "optimizer"
        sec["tensors"] += 1
        pre["tensors"] += 1
        dt["count"] += 1
        if t.alias not in self.unique:
            self._add_elements(e, sec, pre, dt)
        for storage in t.storages:
            self._add_storage(e, storage, sec, dt)

    def _add_elements(
        self, e: TensorEntry, sec: dict[str, Any], pre: dict[str, Any], dt: dict[str, Any]
    ) -> None:
        # Elements and bytes count once per tensor, however many keys (tied weights) name it.
        self.unique[e.info.alias] = e
        numel = self._new_elements(e.info)
        kind = sec["kind"]
        if kind in ("optimizer", "rng", "duplicate"):
            self.state[kind] += numel
        elif kind == "state" or stray_scalar(e.info, kind):
            self.state["other"] += numel
        else:
            self.params += numel
        if kind == "duplicate":
            return  # listed, never counted twice
        self.numel += numel
        for counter in (sec, pre, dt):
            counter["numel"] += numel
        if not e.info.storages:  # no storage to count its bytes by (described only)
            dt["bytes"] += e.info.nbytes

    def _new_elements(self, t: TensorInfo) -> int:
        # Views of one storage (w, w[0] and w.t(), all saved) hold its elements once: count
        # only what a tensor adds to the region of its storage already covered.
        if t.storage is None or t.stride is None or None in t.shape:
            return t.numel
        sid, shape = (t.storage.file, t.storage.key), tuple(d or 0 for d in t.shape)
        if sid not in self.viewed and distinct(shape, t.stride):
            return t.numel  # the one tensor of its storage, each element once: the usual case
        return self.regions.add(sid, t.offset, shape, t.stride)

    def _add_storage(
        self, e: TensorEntry, storage: Storage, sec: dict[str, Any], dt: dict[str, int]
    ) -> None:
        # Views share one storage: its bytes count once, in the first section and under the
        # dtype of the first tensor that uses it (w and w.t() saved: float32's bytes once).
        sid = (storage.file, storage.key)
        users = self.users.setdefault(sid, [])
        if e.key not in users[-1:]:  # one tensor's parts may share a storage
            users.append(e.key)
        if sid not in self.storages:
            self.storages[sid] = storage
            sec["bytes"] += storage.nbytes
            if sec["kind"] != "duplicate":  # listed, never counted twice
                dt["bytes"] += storage.nbytes

    def totals(self, count: int) -> dict[str, Any]:
        return {
            "count": count,
            "numel": self.numel,
            "params": self.params,
            "state": dict(self.state),
            "storages": len(self.storages),
            "dtypes": self.dtypes,
        }

    def notes(self) -> list[str]:
        if not self.regions.approximate:
            return []
        return [
            "some views of shared storages interleave too finely to tell which elements they "
            "share: each was counted whole, so element counts may be overstated"
        ]

    def section_rows(self) -> list[dict[str, Any]]:
        return [{**s, "prefixes": list(s["prefixes"].values())} for s in self.sections.values()]

    def shared_storage(self) -> list[dict[str, Any]]:
        return [
            {"storage": f"{sid[0]}:{sid[1]}", "bytes": self.storages[sid].nbytes, "keys": keys}
            for sid, keys in self.users.items()
            if len(keys) > 1
        ]


def stray_scalar(t: TensorInfo, kind: str) -> bool:
    """A 0-d tensor beside the weights, not in a state dict or module (`{"model": sd,
    "step": torch.tensor(5)}`): a training counter or a loss, never a parameter. A 0-d
    parameter inside a model (CLIP's logit_scale) stays one."""
    return t.shape == () and kind in ("mixed", "tensors")


def _section(key: str, root: Any) -> dict[str, Any]:
    obj = root.get(key) if isinstance(root, dict) and key else root
    module = isinstance(obj, Stub) and "_modules" in (obj.fields() or {})
    kind = "state_dict" if is_state_dict(obj) else "module" if module else "mixed"
    kind = "tensors" if kind == "mixed" and not key else kind
    return {
        "key": key,
        "kind": kind,
        "tensors": 0,
        "numel": 0,
        "bytes": 0,
        "dtypes": {},
        "prefixes": {},
    }
