"""Check a pickle program before the C unpickler runs it, for what `pickle.load` cannot bound.

The C unpickler is fast and runs none of our code inside an opcode, so what happens there is out
of reach once it starts: hashing a dict key made of shared tuples (2**60 steps from 600 bytes),
recursing through a tuple nested two million deep (a segfault), sizing its memo array from an
index, copying one shared argument tuple into every call. `scan` runs the same stack machine
(_pickle.c's rules for marks and the memo) with an abstract value in place of each object (its
nesting depth, the work hashing it takes, its length) and refuses past the limits of limits.py
before a single object is built. It reads the pickle through a window a chunk wide (Chunks):
an argument past the window is read on where the scan needs its bytes (a long, a line) and
skipped where it does not (a string), so a scan holds a chunk, not the pickle.
"""

from __future__ import annotations

import pickle
import pickletools
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from envlock.base.limits import (
    EXPANSION_PER_BYTE,
    MAX_DEPTH,
    MAX_EXPANSION,
    MAX_OPCODES,
    Budget,
    Refused,
)
from envlock.checkpoint.abstract import (
    CHOSEN,
    EMPTY_TUPLE,
    LEAF,
    NONE,
    SMALL_INTS,
    Value,
    collisions,
    number,
    tuple_of,
)

_CODE = {op.name: op.code.encode("latin1")[0] for op in pickletools.opcodes}
# Argument width of every opcode: >= 0 fixed bytes, -1 up to a newline, -2..-5 a length field.
# Protocol 5's buffers are left out (torch never writes them): the scan rejects them as invalid.
_WIDTH = {
    _CODE[op.name]: op.arg.n if op.arg else 0
    for op in pickletools.opcodes
    if op.name not in ("NEXT_BUFFER", "READONLY_BUFFER", "BYTEARRAY8")
}
_LENGTH_FIELD = {-2: (1, False), -3: (4, True), -4: (4, False), -5: (8, False)}
_MARGIN = 9  # bytes of an opcode and its fixed argument (8 at most) that a window must hold
LEAF_NAMES = [
    "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "STRING", "BINSTRING",
    "SHORT_BINSTRING", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "UNICODE", "SHORT_BINUNICODE",
    "BINUNICODE", "BINUNICODE8", "NONE", "NEWTRUE", "NEWFALSE", "FLOAT", "BINFLOAT", "GLOBAL",
    "PERSID", "EXT1", "EXT2", "EXT4",
]  # fmt: skip
_LEAVES = {_CODE[name] for name in LEAF_NAMES}
_TWO_LINES = {_CODE["GLOBAL"], _CODE["INST"]}
# What `_Machine.run` does per opcode byte: the hot opcodes of torch's pickles are inline.
(_SLOW, _FIXED_LEAF, _SIZED_LEAF, _PUT, _GET, _TUPLE, _TUPLE_N, _MARK, _EMPTY, _REDUCE,
 _STOP, _MEMOIZE) = range(12)  # fmt: skip
_KIND = [_SLOW] * 256
for _op, _width in _WIDTH.items():
    if _op in _LEAVES and _width != -1:
        _KIND[_op] = _FIXED_LEAF if _width >= 0 else _SIZED_LEAF
for _names, _kind in (
    ("BINPUT LONG_BINPUT", _PUT), ("BINGET LONG_BINGET", _GET), ("TUPLE", _TUPLE),
    ("TUPLE1 TUPLE2 TUPLE3", _TUPLE_N), ("MARK", _MARK), ("EMPTY_TUPLE", _EMPTY),
    ("REDUCE", _REDUCE), ("STOP", _STOP), ("MEMOIZE", _MEMOIZE),
):  # fmt: skip
    for _name in _names.split():
        _KIND[_CODE[_name]] = _kind
_TUPLE_LENGTH = {_CODE["TUPLE1"]: 1, _CODE["TUPLE2"]: 2, _CODE["TUPLE3"]: 3}
_LONGS = {_CODE["LONG1"], _CODE["LONG4"]}
_CONSTANTS = {
    _CODE["NONE"]: NONE,
    _CODE["NEWTRUE"]: SMALL_INTS[1],
    _CODE["NEWFALSE"]: SMALL_INTS[0],
}


@dataclass(frozen=True)
class Scanned:
    """What a pickle that passed the scan will build."""

    opcodes: int
    expansion: int
    largest: int = 0  # items of the largest dict, list or set it builds
    # The memo slots some GET reads: the only ones a reader that drops what it has folded
    # must keep (folding.py); every other slot is written and never read again.
    read_slots: frozenset[int] = frozenset()


class Chunks:
    """A pickle's bytes as they are read, a chunk at a time (the scan holds one, not all):
    `size` in all, `next()` the following chunk (b"" at the end)."""

    def __init__(self, chunks: Iterator[bytes], size: int) -> None:
        self._chunks, self.size = chunks, size

    def next(self) -> bytes:
        return next(self._chunks, b"")


def scan(data: bytes | Chunks, budget: Budget | None = None) -> Scanned:
    """Refuse (Refused) or reject as corrupt (pickle.UnpicklingError) before unpickling.

    With the command's `budget`, its pickle opcodes left bound the count too: a directory of
    pickles each under MAX_OPCODES is refused once their sum passes the command's budget."""
    left = budget.left("pickle opcodes") if budget is not None else MAX_OPCODES
    if not isinstance(data, Chunks):
        data = Chunks(iter((bytes(data),)), len(data))
    machine = _Machine(data, min(MAX_OPCODES, left))
    try:
        machine.run()
    except _OverBudget:
        assert budget is not None
        budget.spent["pickle opcodes"] += machine.limit + 1
        raise budget.refused("pickle opcodes") from None
    return Scanned(
        machine.opcodes, machine.expansion, machine.largest, frozenset(machine.read_slots)
    )


class _OverBudget(Exception):
    """The scan passed the command's budget of opcodes (not the per-pickle MAX_OPCODES)."""


def _too_many() -> Refused:
    return Refused("the pickle's count of opcodes", f"{MAX_OPCODES:,}")


def _too_deep(depth: int) -> Refused:
    return Refused(f"the pickle's nesting ({depth:,} levels so far)", f"{MAX_DEPTH} levels")


class _Machine:
    """The unpickler's stack, marks and memo, holding `Value`s instead of objects."""

    def __init__(self, source: Chunks, limit: int = MAX_OPCODES) -> None:
        # A window on the pickle: the bytes from the opcode under way on, a chunk or more;
        # what an opcode's argument spans past it is read on (a string's bytes skipped).
        self.source, self.limit = source, limit
        self.data, self.eof, self.done = b"", False, False
        self.stack: list[Value] = []
        self.marks: list[int] = []
        # Python's pickler numbers the memo 0, 1, 2, …, and a slot past the next is refused
        # (_put): a list, 8 bytes a slot (a dict of 600,000 slots held 40 MB while scanning).
        self.memo: list[Value] = []
        self.opcodes = self.expansion = self.largest = 0
        self.read_slots: set[int] = set()
        self.budget = MAX_EXPANSION + EXPANSION_PER_BYTE * source.size

    def run(self) -> None:
        pos = 0
        while not self.done:
            if not self._slide(pos):
                raise pickle.UnpicklingError(
                    "the pickle ends without a STOP opcode: it is truncated"
                )
            pos = self._window()

    def _slide(self, pos: int) -> bool:
        """Move the window on to `pos` (past its end: the rest of a string, skipped) and read
        the next chunk into it; False at the end of the pickle with nothing left to read."""
        rest = self.data[pos:] if pos <= len(self.data) else b""
        skip = max(0, pos - len(self.data))
        while skip:
            chunk = self.source.next()
            if not chunk:
                raise pickle.UnpicklingError("bad length or truncated data")
            rest, skip = chunk[skip:], max(0, skip - len(chunk))
        chunk = self.source.next() if not self.eof else b""
        self.eof = not chunk
        self.data = rest + chunk
        return bool(self.data)

    def _more(self) -> bool:
        """One more chunk onto the window, for an argument that spans past it."""
        chunk = b"" if self.eof else self.source.next()
        self.eof = not chunk
        self.data += chunk
        return bool(chunk)

    def _view(self) -> tuple[bytes, int, int]:
        """The window, its end, and where the last opcode whose fixed part it holds starts
        (at the end of the pickle, its end)."""
        end = len(self.data)
        return self.data, end, end if self.eof else end - _MARGIN

    def _window(self) -> int:
        """The opcodes whose fixed part lies in the window; where the next one starts.
        Runs once per opcode: the commonest (strings, memo slots, small ints, marks) are
        inline, the other fast kinds one call away, the rest go through `_execute`."""
        stack, marks, memo = self.stack, self.marks, self.memo
        data, end, safe = self._view()
        pos, opcodes, limit = 0, self.opcodes, self.limit
        while pos < safe:
            op = data[pos]
            kind = _KIND[op]
            opcodes += 1  # each makes one object at most
            if opcodes > limit:
                raise _OverBudget if limit < MAX_OPCODES else _too_many()
            if op == 0x58 and pos + 5 <= end:  # BINUNICODE: a config's strings, each its own
                pos += 5 + int.from_bytes(data[pos + 1 : pos + 5], "little")
                if pos > end and self.eof:
                    raise pickle.UnpicklingError("bad length or truncated data")
                stack.append(LEAF)
            elif op == 0x72 and pos + 5 <= end:  # LONG_BINPUT of the next slot: one per object
                if int.from_bytes(data[pos + 1 : pos + 5], "little") != len(memo) or len(stack) <= (
                    marks[-1] if marks else 0
                ):
                    pos = self._step(kind, op, pos)
                    data, end, safe = self._view()
                    continue
                memo.append(stack[-1])
                pos += 5
            elif kind == _FIXED_LEAF:
                small = op == 0x4B and pos + 1 < end  # BININT1, the commonest
                stack.append(SMALL_INTS[data[pos + 1]] if small else self._fixed(op, pos))
                pos += 1 + _WIDTH[op]
            elif kind == _MARK:
                marks.append(len(stack))
                pos += 1
            elif kind == _STOP:
                self._top()
                self.opcodes, self.done = opcodes, True
                return pos
            else:
                self.opcodes = opcodes
                pos = self._step(kind, op, pos)
                data, end, safe = self._view()  # an argument may have widened it
        self.opcodes = opcodes
        return pos

    def _step(self, kind: int, op: int, pos: int) -> int:
        """One opcode other than the inline ones; where the next one starts."""
        if kind in (_PUT, _GET):
            return self._memo_op(kind, op, pos)
        if kind == _MEMOIZE:  # protocol 4's PUT: one per object of a raw pickle
            self.memo.append(self._top())
            return pos + 1
        if kind == _REDUCE:
            self._reduce()
        elif kind in (_TUPLE, _TUPLE_N):
            items = self._pop_mark() if kind == _TUPLE else self._pop(_TUPLE_LENGTH[op])
            self._push(self._tuple(items))
        elif kind == _SIZED_LEAF:
            stop = self._sized(pos, content=op in _LONGS)
            self.stack.append(self._long(pos, stop) if op in _LONGS else LEAF)
            return stop
        elif kind == _EMPTY:
            self.stack.append(EMPTY_TUPLE)
        else:
            return self._slow(op, pos)
        return pos + 1

    def _memo_op(self, kind: int, op: int, pos: int) -> int:
        """BINGET/BINPUT and their long forms: a reference to a memo slot, or a new one."""
        stop = pos + 1 + _WIDTH[op]
        index = int.from_bytes(self.data[pos + 1 : stop], "little")
        if stop > len(self.data):
            raise pickle.UnpicklingError("pickle data was truncated")
        if kind == _GET:
            value = self.memo[index] if index < len(self.memo) else None
            if value is None:
                raise pickle.UnpicklingError(f"memo value not found at index {index}")
            self.read_slots.add(index)
            self.stack.append(value)
        elif index <= len(self.memo) and len(self.stack) > self._fence():
            self._store(index, self.stack[-1])
        else:
            self._put(index)  # raises
        return stop

    def _reduce(self) -> None:
        """The callable below the argument tuple becomes the result."""
        if len(self.stack) - 2 < self._fence():
            raise pickle.UnpicklingError("unpickling stack underflow")
        args = self.stack.pop()
        self._spend(args.size)  # the call copies its argument tuple
        self.stack[-1] = Value(args.depth + 1, 1, 0, False, CHOSEN)

    def _slow(self, op: int, pos: int) -> int:
        width = _WIDTH.get(op)
        if width is None:
            raise pickle.UnpicklingError(f"invalid opcode {op:#04x} at byte {pos}")
        arg_at, stop = pos + 1, self._skip(op, width, pos + 1)
        self._execute(chr(op), self.data[arg_at:stop])
        return stop

    # --- the stack, as _pickle.c guards it: nothing below the last mark may be popped -------

    def _fence(self) -> int:
        return self.marks[-1] if self.marks else 0

    def _push(self, value: Value) -> None:
        if value.depth > MAX_DEPTH:
            raise _too_deep(value.depth)
        self.stack.append(value)

    def _pop(self, n: int) -> list[Value]:
        start = len(self.stack) - n
        if start < self._fence():
            raise pickle.UnpicklingError("unpickling stack underflow")
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def _pop_mark(self) -> list[Value]:
        if not self.marks:
            raise pickle.UnpicklingError("could not find MARK")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def _top(self) -> Value:
        if len(self.stack) <= self._fence():
            raise pickle.UnpicklingError("unpickling stack underflow")
        return self.stack[-1]

    def _get(self, index: int) -> None:
        if index >= len(self.memo):
            raise pickle.UnpicklingError(f"memo value not found at index {index}")
        self.read_slots.add(index)
        self.stack.append(self.memo[index])  # a reference: no new object

    def _put(self, index: int) -> None:
        # Python's pickler numbers the memo 0, 1, 2, …; the C unpickler sizes an array by the
        # index, so a hostile 2**31 would allocate gigabytes.
        if index > len(self.memo):
            raise pickle.UnpicklingError(f"memo index {index} out of range")
        self._store(index, self._top())

    def _store(self, index: int, value: Value) -> None:
        """Slot `index`, at most one past the last: a new slot or one written again."""
        if index == len(self.memo):
            self.memo.append(value)
        else:
            self.memo[index] = value

    # --- what the values cost ----------------------------------------------------------------

    def _spend(self, work: int) -> None:
        self.expansion += work
        if self.expansion > self.budget:
            raise Refused(
                "the work of hashing keys and copying arguments (repeated by shared references "
                "or colliding hashes)",
                f"{self.budget:,} steps ({MAX_EXPANSION:,} + {EXPANSION_PER_BYTE} per byte)",
            )

    def _tuple(self, items: list[Value]) -> Value:
        return tuple_of(items, self.budget + 1)

    def _hashed(self, into: Value, keys: list[Value]) -> None:
        """Charge for hashing `keys` into the dict or set `into`, collisions included."""
        self._spend(sum(v.hashing for v in keys) + collisions(into, keys))

    def _grow(self, target: Value, items: list[Value], added: int) -> None:
        if target.frozen:  # adding to a tuple or a leaf fails in the unpickler itself
            return
        target.size += added
        self.largest = max(self.largest, target.size)
        target.depth = max(target.depth, 1 + max((v.depth for v in items), default=0))
        if target.depth > MAX_DEPTH:
            raise _too_deep(target.depth)

    def _call(self, args: list[Value]) -> Value:
        # A call copies its argument tuple (and keyword dict): a shared one, every time.
        self._spend(sum(a.size for a in args))
        return Value(1 + max(a.depth for a in args), 1, 0, False, CHOSEN)

    # --- the other opcodes -------------------------------------------------------------------

    def _fixed(self, op: int, pos: int) -> Value:
        arg = self.data[pos + 1 : pos + 1 + _WIDTH[op]]
        if op == 0x4D:  # BININT2
            return number(int.from_bytes(arg, "little"))
        if op == 0x4A:  # BININT
            return number(int.from_bytes(arg, "little", signed=True))
        if op == 0x47 and len(arg) == 8:  # BINFLOAT
            return number(struct.unpack(">d", arg)[0])
        return _CONSTANTS.get(op, LEAF)

    def _long(self, pos: int, stop: int) -> Value:
        size = _LENGTH_FIELD[_WIDTH[self.data[pos]]][0]
        return number(int.from_bytes(self.data[pos + 1 + size : stop], "little", signed=True))

    def _text_leaf(self, c: str, arg: bytes) -> Value:
        """INT, LONG and FLOAT of protocol 0 as numbers; other text leaves as strings."""
        text = arg[:-1]
        try:
            if c == "F":
                return number(float(text))
            if c in "IL":
                return number(int(text[:-1] if c == "L" and text.endswith(b"L") else text))
        except ValueError:  # the unpickler fails on it too
            pass
        return LEAF

    def _sized(self, pos: int, content: bool = False) -> int:
        """Skip a string, bytes or long with a length field: its bytes past the window are
        read on only where the scan needs them (`content`: a long's value)."""
        size, signed = _LENGTH_FIELD[_WIDTH[self.data[pos]]]
        length = int.from_bytes(self.data[pos + 1 : pos + 1 + size], "little", signed=signed)
        stop = pos + 1 + size + length
        if length < 0 or pos + 1 + size > len(self.data):
            raise pickle.UnpicklingError(f"bad length or truncated data at byte {pos}")
        while stop > len(self.data) and (content or self.eof):
            if not self._more():
                raise pickle.UnpicklingError(f"bad length or truncated data at byte {pos}")
        return stop

    def _skip(self, op: int, width: int, pos: int) -> int:
        data = self.data
        if width >= 0:
            stop = pos + width
        elif width == -1:
            stop = self._line_end(pos, 2 if op in _TWO_LINES else 1)
            data = self.data
        else:
            return self._sized(pos - 1, content=True)
        if stop > len(data):
            raise pickle.UnpicklingError("pickle data was truncated")
        return stop

    def _line_end(self, pos: int, lines: int) -> int:
        """Where the `lines`th newline from `pos` ends, the window widened to it."""
        stop = pos - 1
        for _ in range(lines):
            found = self.data.find(b"\n", stop + 1)
            while found < 0 and self._more():
                found = self.data.find(b"\n", stop + 1)
            if found < 0:
                raise pickle.UnpicklingError(f"opcode at byte {pos - 1} lacks its newline")
            stop = found
        return stop + 1

    def _execute(self, c: str, arg: bytes) -> None:
        if ord(c) in _LEAVES:  # the text forms of protocol 0, GLOBAL and PERSID
            self._push(self._text_leaf(c, arg))
        elif c in "gp":  # GET, PUT with a decimal index
            self._text_memo(c, arg)
        elif c in "]}\x8f":  # EMPTY_LIST, EMPTY_DICT, EMPTY_SET
            self._push(Value(1, 1, 0, False))
        elif c in "ld\x91":  # LIST, DICT, FROZENSET
            self._push(self._container(c))
        elif c in "asbu\x90e":  # APPEND, SETITEM, BUILD; SETITEMS, ADDITEMS, APPENDS
            self._mutate(c)
        elif c in "\x81\x92oi":  # NEWOBJ, NEWOBJ_EX, OBJ, INST
            self._push(self._call(self._new_arguments(c)))
        elif c in "\x93Q":  # STACK_GLOBAL, BINPERSID
            self._pop(2 if c == "\x93" else 1)
            self._push(LEAF)
        else:
            self._stack_opcode(c, arg)

    def _text_memo(self, c: str, arg: bytes) -> None:
        text = arg[:-1]
        if not (text.isdigit() and len(text) < 20):
            raise pickle.UnpicklingError(f"bad memo index {text[:20]!r}")
        if c == "g":
            self._get(int(text))
        else:
            self._put(int(text))

    def _container(self, c: str) -> Value:
        """LIST, DICT or FROZENSET of the items above the mark."""
        items = self._pop_mark()
        made = Value(1 + max((v.depth for v in items), default=0), 1, len(items), False)
        self.largest = max(self.largest, len(items))
        if c == "d":
            self._pairs(made, items)
        elif c == "\x91":
            self._hashed(made, items)
            made.frozen, made.key, made.keys = True, CHOSEN, None
        return made

    def _stack_opcode(self, c: str, arg: bytes) -> None:
        if c == "0":  # POP: a mark right at the top goes first
            if self.marks and self.marks[-1] == len(self.stack):
                self.marks.pop()
            else:
                self._pop(1)
        elif c == "1":  # POP_MARK
            self._pop_mark()
        elif c == "2":  # DUP
            self.stack.append(self._top())
        elif c == "\x94":  # MEMOIZE
            self.memo.append(self._top())
        elif c == "\x80" and arg[0] > pickle.HIGHEST_PROTOCOL:
            raise pickle.UnpicklingError(f"unsupported pickle protocol: {arg[0]}")
        # FRAME and PROTO change nothing on the stack.

    def _new_arguments(self, c: str) -> list[Value]:
        if c == "\x81":  # NEWOBJ cls args
            return self._pop(2)[1:]
        if c == "\x92":  # NEWOBJ_EX cls args kwargs
            return self._pop(3)[1:]
        items = self._pop_mark()  # OBJ: MARK cls args… ; INST: MARK args… (class in the op)
        if c == "o" and not items:
            raise pickle.UnpicklingError("OBJ without a class")
        return [self._tuple(items[1:] if c == "o" else items)]

    def _mutate(self, c: str) -> None:
        items = self._pop(2 if c == "s" else 1) if c in "asb" else self._pop_mark()
        target = self._top()  # the object below the values (for one value) or below the mark
        if c in "su":  # SETITEM, SETITEMS
            self._pairs(target, items)
        elif c == "\x90":  # ADDITEMS
            self._hashed(target, items)
        self._grow(target, items, len(items) // 2 if c in "su" else len(items))

    def _pairs(self, into: Value, items: list[Value]) -> None:
        if len(items) % 2:
            raise pickle.UnpicklingError("odd number of items for DICT or SETITEMS")
        self._hashed(into, items[::2])
