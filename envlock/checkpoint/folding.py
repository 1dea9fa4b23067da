"""Read a pickle with a container past FOLD_AT items, folding such containers as they are read.

The C unpickler keeps every object it makes, and its memo every string: a 600,000-key config
costs 200 MB. This reader is Python's own pure-Python unpickler (`pickle._Unpickler`, the
reference the C one follows) with unpickler.py's restricted globals, changed in three places:
a dict or list that passes FOLD_AT items and holds no tensor is folded (fold.py), its items
dropped as they come; the memo keeps only the slots the scan saw read again; and a change to
an object after a fold digested it, or a tensor met inside a fold, ends this reading
(`Unfoldable`), and the caller reads the pickle with the C unpickler instead. Run it only on a
pickle scan.py has passed: its opcodes, nesting and hashing work are bounded there.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import replace
from typing import Any, ClassVar

from envlock.checkpoint.allowed import OrderedDict
from envlock.checkpoint.digest import Digester, TooBig
from envlock.checkpoint.fold import FOLD_AT, Folder, Reread, remember
from envlock.checkpoint.inert import Stub
from envlock.checkpoint.scan import Scanned
from envlock.checkpoint.unpickler import Restricted

_FOLDABLE = (dict, list, OrderedDict)
_Base: Any = pickle._Unpickler  # the reference unpickler, in Python
_Stop: Any = getattr(pickle, "_Stop")  # noqa: B009 — how STOP ends the reference unpickler's loop, with the value
_LONG_INDEX = struct.Struct("<I")
_SEARCHED = 10_000  # objects of a call's arguments searched for a folded container


class Unfoldable(Exception):
    """This pickle cannot be read folded (a tensor or a change inside a fold): read it whole."""


class FoldingUnpickler(Restricted, _Base):
    """The restricted unpickler in Python, folding the containers FOLD_AT passes."""

    dispatch: ClassVar[dict[int, Any]] = dict(_Base.dispatch)

    def __init__(
        self,
        file: Any,
        *,
        scanned: Scanned,
        reread: Reread | None,
        keep: dict[int, set[int]] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(file, **kw)
        self.pickled = file  # the pickle's bytes, in memory: read through the gate before
        self._read_slots, self._slots = scanned.read_slots, 0
        self._kept: list[Any] = []  # what the memo keeps: alive, so their ids stay theirs
        self.digester = Digester(stable=set())
        self.folders: dict[int, tuple[Any, Folder]] = {}  # id of the emptied container -> it
        self.by_ordinal: dict[int, Folder] = {}
        self._never: dict[int, Any] = {}  # containers found to hold objects: kept whole
        self._reread = reread
        self._kept_parts = keep or {}  # {a fold's ordinal: its parts whose entries are kept}

    def load(self) -> Any:
        try:
            root = self._run()
        except (TooBig, RecursionError):
            raise Unfoldable("a fold's digest is past its budget") from None
        return self._swap_in_folds(root) if self.folders else root

    def _run(self) -> Any:
        """`pickle._Unpickler.load`, reading straight from the file (in memory): a FRAME only
        announces how many bytes follow (load_frame), so no unframing layer is needed, and
        each opcode costs one call less."""
        self.read, self.readline = self._file_read, self._file_readline
        self.metastack: list[list[Any]] = []
        self.stack: list[Any] = []
        self.append = self.stack.append
        self.proto = 0
        pickled, dispatch = self.pickled, self.dispatch
        try:
            while True:
                key = pickled.read(1)
                if not key:
                    raise EOFError
                dispatch[key[0]](self)
        except _Stop as stop:
            return stop.value

    def load_frame(self) -> None:
        self.pickled.read(8)  # the frame's length: its opcodes follow in the file as they are

    # -- the memo: only slots read again ---------------------------------------------------
    def _put(self, index: int) -> None:
        self._slots = max(self._slots, index + 1)
        if index in self._read_slots:
            self.memo[index] = self.stack[-1]
            self._keep(self.stack[-1])

    def _keep(self, value: Any) -> None:
        """`value` may be reached again: kept alive, and watched (a fold that digests it
        seals it: a later change to it ends this reading)."""
        self._kept.append(value)
        assert self.digester.stable is not None
        self.digester.stable.add(id(value))

    def load_put(self) -> None:
        self._put(int(self.readline()[:-1].decode("ascii")))

    def load_binput(self) -> None:
        self._put(self.pickled.read(1)[0])

    def load_long_binput(self) -> None:
        self._put(_LONG_INDEX.unpack(self.pickled.read(4))[0])

    def load_memoize(self) -> None:
        self._put(self._slots)

    # -- what grows a container ----------------------------------------------------------
    def load_setitems(self) -> None:
        items = self.pop_mark()
        self._set(self.stack[-1], items)

    def load_setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self._set(self.stack[-1], [key, value])

    def load_appends(self) -> None:
        items = self.pop_mark()
        self._extend(self.stack[-1], items)

    def load_append(self) -> None:
        value = self.stack.pop()
        self._extend(self.stack[-1], [value])

    def load_build(self) -> None:
        self._unsealed(self.stack[-2])
        self._passed(type(self.stack[-2]), self.stack[-1])  # a __setstate__ reads its state
        _Base.load_build(self)

    def load_additems(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        self._unsealed(target)
        if isinstance(target, set):
            target.update(items)
        else:
            for item in items:
                target.add(item)

    def load_dict(self) -> None:
        _Base.load_dict(self)
        self._grew(self.stack[-1])

    def load_list(self) -> None:
        _Base.load_list(self)
        self._grew(self.stack[-1])

    def load_reduce(self) -> None:
        self._passed(self.stack[-2], self.stack[-1])
        _Base.load_reduce(self)
        self._grew(self.stack[-1])

    def load_newobj(self) -> None:
        self._passed(self.stack[-2], self.stack[-1])
        _Base.load_newobj(self)

    def load_newobj_ex(self) -> None:
        self._passed(self.stack[-3], (self.stack[-2], self.stack[-1]))
        _Base.load_newobj_ex(self)

    def _instantiate(self, klass: Any, args: Any) -> None:
        self._passed(klass, args)
        _Base._instantiate(self, klass, args)

    def _passed(self, call: Any, args: Any) -> None:
        """A folded container handed to a call that reads it (`set(list)`, an OrderedDict
        from pairs) would be read empty: read the pickle whole instead. A stub only records
        its arguments, as the tree holds them: its folds are swapped in like any other."""
        if not self.folders or (isinstance(call, type) and issubclass(call, Stub)):
            return
        if isinstance(call, Stub) or not self._holds_folded(args, _SEARCHED):
            return
        raise Unfoldable("a folded container passed to a call")

    def _holds_folded(self, args: Any, budget: int) -> bool:
        """Whether a folded container is in `args` (True, too, past `budget` objects)."""
        seen, todo = 0, [args]
        while todo:
            obj = todo.pop()
            seen += 1
            if id(obj) in self.folders or seen > budget:
                return True
            if isinstance(obj, dict):
                todo.extend(obj.values())
            elif isinstance(obj, list | tuple):
                todo.extend(obj)
        return False

    def _set(self, target: Any, items: list[Any]) -> None:
        self._unsealed(target)
        folder = self._folder(target)
        if folder is None:
            for i in range(0, len(items), 2):
                target[items[i]] = items[i + 1]
            self._grew(target)
            return
        for i in range(0, len(items), 2):
            folder.add(items[i], items[i + 1])
        self._no_objects()

    def _extend(self, target: Any, items: list[Any]) -> None:
        self._unsealed(target)
        folder = self._folder(target)
        if folder is None:
            extend = getattr(target, "extend", None)
            if extend is not None:
                extend(items)
            else:
                for item in items:
                    target.append(item)
            self._grew(target)
            return
        for item in items:
            folder.append(item)
        self._no_objects()

    # -- folding -------------------------------------------------------------------------
    def _folder(self, target: Any) -> Folder | None:
        found = self.folders.get(id(target))
        return found[1] if found is not None and found[0] is target else None

    def _unsealed(self, target: Any) -> None:
        if id(target) in self.digester.sealed:
            raise Unfoldable("a value changed after a fold read it")

    def _no_objects(self) -> None:
        if self.digester.objects:
            raise Unfoldable("a tensor or an object inside a folded container")

    def _grew(self, target: Any) -> None:
        """Fold `target` once it passes FOLD_AT items, unless it holds a tensor or an object
        (a state dict, an optimizer's state, DCP's metadata: plain data alone is folded)."""
        if type(target) not in _FOLDABLE or len(target) <= FOLD_AT or id(target) in self._never:
            return
        if not self.metastack and self.stack and self.stack[0] is target:
            return  # the pickle's root, or so far: inspect reads it entry by entry
        ordinal = len(self.by_ordinal)
        folder = Folder(target, self.digester, ordinal, self._kept_parts.get(ordinal, set()))
        items = target.items() if folder.is_dict else ((None, v) for v in target)
        for key, value in items:
            folder.add(key, value) if folder.is_dict else folder.append(value)
            if self.digester.objects:  # kept whole, known at its first object
                self.digester.objects = 0
                self._never[id(target)] = target
                return
        target.clear()
        folder.only_kept = bool(folder.keep)
        self.folders[id(target)] = (target, folder)
        self.by_ordinal[ordinal] = folder
        self.digester.stand_ins[id(target)] = folder.fold

    def _swap_in_folds(self, root: Any) -> Any:
        """Every folded container, wherever the tree holds it, replaced by its Fold."""
        swap: dict[int, Any] = {}
        for target, folder in self.folders.values():
            fold = replace(folder.fold(), reread=self._reread)
            remember(fold)
            swap[id(target)] = fold
        done: dict[int, Any] = {}
        for folder in self.by_ordinal.values():
            folder.kept = [(p, k, _swapped(v, swap, done)) for p, k, v in folder.kept]
        return _swapped(root, swap, done)


def _swapped(obj: Any, swap: dict[int, Any], done: dict[int, Any]) -> Any:
    key = id(obj)
    if key in swap:
        return swap[key]
    if key in done or not isinstance(obj, dict | list | tuple | Stub):
        return done.get(key, obj)
    if isinstance(obj, tuple):
        items = [_swapped(v, swap, done) for v in obj]
        done[key] = obj if all(a is b for a, b in zip(items, obj, strict=True)) else tuple(items)
        return done[key]
    done[key] = obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            obj[k] = _swapped(v, swap, done)
    elif isinstance(obj, list):
        obj[:] = [_swapped(v, swap, done) for v in obj]
    else:
        _swap_stub(obj, swap, done)
    return obj


def _swap_stub(obj: Stub, swap: dict[int, Any], done: dict[int, Any]) -> None:
    obj.args = _swapped(obj.args, swap, done)
    obj.state = _swapped(obj.state, swap, done)
    for part in (obj.kwargs, obj.items, obj.listitems):
        _swapped(part, swap, done)


FoldingUnpickler.dispatch.update(
    {
        pickle.FRAME[0]: FoldingUnpickler.load_frame,
        pickle.PUT[0]: FoldingUnpickler.load_put,
        pickle.BINPUT[0]: FoldingUnpickler.load_binput,
        pickle.LONG_BINPUT[0]: FoldingUnpickler.load_long_binput,
        pickle.MEMOIZE[0]: FoldingUnpickler.load_memoize,
        pickle.SETITEMS[0]: FoldingUnpickler.load_setitems,
        pickle.SETITEM[0]: FoldingUnpickler.load_setitem,
        pickle.APPENDS[0]: FoldingUnpickler.load_appends,
        pickle.APPEND[0]: FoldingUnpickler.load_append,
        pickle.BUILD[0]: FoldingUnpickler.load_build,
        pickle.ADDITEMS[0]: FoldingUnpickler.load_additems,
        pickle.DICT[0]: FoldingUnpickler.load_dict,
        pickle.LIST[0]: FoldingUnpickler.load_list,
        pickle.REDUCE[0]: FoldingUnpickler.load_reduce,
        pickle.NEWOBJ[0]: FoldingUnpickler.load_newobj,
        pickle.NEWOBJ_EX[0]: FoldingUnpickler.load_newobj_ex,
    }
)
