"""Every bound on what reading untrusted data may cost, in one place.

A checkpoint is hostile data: a few hundred bytes of pickle can describe an exponential object
graph, a zip member can inflate a thousandfold, a shape can name 2**63 elements. Each limit
below is far above what a real checkpoint needs and far below what exhausts a machine; passing
one is refused with `Refused` ("refusing: … exceeds …", exit 3), never read on regardless.
Text from a checkpoint that reaches a message goes through `shown`/`brief`: bounded, and with
control characters escaped so that nothing in the file can write to the terminal.

Two kinds of bound: a limit caps one file (its size by kind: MAX_BYTES, read through
envlock/base/untrusted.py); a budget (BUDGET) caps one command: everything one `inspect` or `diff`
reads, all files of a directory and both sides together, spends from one `Budget`, so a
directory of files each under its limit is refused as soon as their sum passes the budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from envlock.agent.core import MAX_ENV_HEADER as MAX_ENV_HEADER
from envlock.agent.core import MAX_ENV_HEADERS as MAX_ENV_HEADERS
from envlock.agent.core import MAX_ENV_TEXT as MAX_ENV_TEXT
from envlock.errors import EnvlockError, OperationError

MiB = 2**20
# Zip archives (torch.save): only data.pkl is read; storages are sized from the zip directory.
MAX_PICKLE_BYTES = 256 * MiB  # data.pkl decompressed (a 70B model's is well under 1 MiB)
MAX_INFLATION = 20  # decompressed / compressed for a deflated data.pkl (torch stores it raw)
MAX_ZIP_ENTRIES = 1_000_000  # one per storage
# The pickle program, checked before it runs (see scan.py).
MAX_OPCODES = 50_000_000  # each makes one object at most (the unpickler's ~60 bytes)
MAX_DEPTH = 256  # nesting of containers and objects (a pickled nn.Module: 4 per module level)
# Work a pickle may cause beyond reading its bytes: hashing keys built of shared tuples,
# comparing keys chosen to share a hash, copying a shared argument into every call ...
MAX_EXPANSION = 1_000_000
EXPANSION_PER_BYTE = 2  # ... plus this much per byte of pickle
MAX_GLOBALS = 10_000  # distinct unknown classes and functions a pickle may name
MAX_GLOBAL_NAME = 1_000  # characters in a module or class name
# Tensors.
MAX_DIMS = 64  # torch's own limit on a tensor's dimensions
MAX_DIM = 2**63 - 1  # a dim, a stride, an offset and the element count are int64 in torch
# JSON (safetensors headers, sharded indexes, config.json, trainer_state.json).
MAX_HEADER_BYTES = 100 * MiB  # the safetensors format's own limit
MAX_JSON_BYTES = 64 * MiB
MAX_JSON_DEPTH = 64
# The walk over the loaded object tree and the report built from it.
MAX_WALK = 1_000_000  # object visits, plus WALK_PER_BYTE per byte read (shared refs inflate)
WALK_PER_BYTE = 4
MAX_TEXT = 1_000  # characters of a key, name or value shown (JSON and human output alike)
# Counting views of one storage once (regions.py): the runs of consecutive elements they are
# cut into. Past it, views are counted whole, with a note: the count is all that is at stake.
MAX_VIEW_RUNS = 250_000
MAX_TENSORS = 250_000  # tensors one file may describe (a 671B model has ~100,000 in all)
MAX_JSON_ENTRIES = 50_000  # entries of one list in `--json` output; the rest counted in a note

GiB = 2**30
# The size of one file read as untrusted bytes, by what it is (untrusted.py checks it on the
# open descriptor). Checkpoints are large but only their headers and pickles are read, whose
# own limits are above; a cache archive is streamed to the target, never held. Each
# checkpoint format's row (checkpoint/formats.py) names the key its bytes are read under.
MAX_BYTES = {
    "snapshot": 64 * MiB,  # envlock-snapshot.json: a real one is a few hundred kB
    "lock": 64 * MiB,  # pylock.toml from a snapshot or given to diff
    "json": MAX_JSON_BYTES,  # JSON beside a checkpoint: config.json, a sharded index
    "pickle": MAX_PICKLE_BYTES,  # a pickle read whole (a raw pickle, DCP's .metadata)
    "checkpoint": 16 * 2**40,  # a file of tensors: its tensor bytes are not read
    "cache archive": 256 * GiB,  # a compile-cache archive (cache restore)
    # Files the user names (base/untrusted.py's `read_named`): a refusal is a usage error.
    "profile": 16 * MiB,  # profile.toml: a real one is a few kB
    "config": 64 * MiB,  # snapshot --config FILE (JSON)
    "script": 256 * MiB,  # a script the profile pins (hashed, shipped to the target)
    "wheel": 16 * GiB,  # a wheel in the profile's find-links (hashed as a stream)
}

# Per command (`inspect`, `diff` with both its sides, `check`'s probe in agent/probe.py): what
# all the untrusted data it reads may cost together. Sized for about BUDGET_SECONDS of one
# core and a few hundred MiB of memory at the rates measured for this reader (~1 M pickle
# opcodes/s scanned and unpickled, ~30 us and ~1 kB per tensor described), far above any
# real checkpoint.
BUDGET_SECONDS = 10
BUDGET = {
    "bytes": 512 * MiB,  # of snapshots, locks, JSON, pickles and headers read (not tensor data)
    "pickle opcodes": 5_000_000,  # ~60 bytes of memory and ~1 us of time each
    "tensors": 500_000,  # described, over every file (MAX_TENSORS per file)
    # Read only by `diff --weights` (checkpoint/weights.py), each side also bounded by the
    # size of its own files: both sides of two checkpoints of MAX_BYTES["checkpoint"].
    "tensor bytes": 32 * 2**40,
}
# What one `inspect` or `diff` may hold, whatever the size of what it reads: the pickles' objects
# (one side's at a time, each bounded by "pickle opcodes" above: ~60 bytes each) and what a
# side keeps of them (a config value past summary.py's budget is kept as its digest, digested
# streaming: digest.py). The largest config the budget admits (1.2 M keys, 4.8 M opcodes) is
# inspected and diffed under an address-space limit of this size by
# tests/checkpoint/test_config_memory.py; past the budget it is refused, never read on.
MEMORY_BOUND = 400 * MiB
# What check's probe reads from the environment's METADATA files (MAX_ENV_TEXT, _HEADER,
# _HEADERS) is set where the probe runs, agent/core.py, and imported above.


class Refused(OperationError):
    """A checkpoint past one of the limits above: refused before it costs time or memory."""

    def __init__(self, what: str, limit: str, *, hint: str | None = None) -> None:
        super().__init__(
            f"refusing: {what} exceeds {limit}",
            hint=hint
            or "no real checkpoint comes near this limit: the file is corrupt or built to "
            "exhaust time or memory (envlock inspect's limits are listed on the docs' "
            "Security page)",
        )
        self.what, self.limit = what, limit

    def at(self, where: str) -> Refused:
        """The same refusal, naming the file it came from."""
        return Refused(f"{where}: {self.what}", self.limit, hint=self.hint)


class Budget:
    """What one command has left to spend on untrusted data (BUDGET), shared by every read."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.spent = dict.fromkeys(BUDGET, 0)

    def left(self, kind: str) -> int:
        return BUDGET[kind] - self.spent[kind]

    def spend(self, kind: str, amount: int, where: str = "") -> None:
        self.spent[kind] += amount
        if self.spent[kind] > BUDGET[kind]:
            raise self.refused(kind, where)

    def refused(self, kind: str, where: str = "") -> Refused:
        what = f"the {kind} read by this `{self.command}` ({self.spent[kind]:,} so far)"
        return Refused(
            f"{where}: {what}" if where else what,
            f"its budget of {BUDGET[kind]:,} {kind} per command",
            hint="no real run comes near this budget: the files read are built to exhaust "
            "time or memory (envlock's budgets are listed on the docs' Security page)",
        )


_BUDGET: ContextVar[Budget | None] = ContextVar("envlock_budget", default=None)


@contextmanager
def command_budget(command: str) -> Iterator[Budget]:
    """The budget of the running command: opened once, shared by every read within."""
    active = _BUDGET.get()
    if active is not None:
        yield active
        return
    token = _BUDGET.set(Budget(command))
    try:
        yield _BUDGET.get() or Budget(command)
    finally:
        _BUDGET.reset(token)


def budget() -> Budget:
    """The running command's budget; outside one (a library call), a fresh one for the call."""
    return _BUDGET.get() or Budget("read")


def shown(text: str, limit: int = 200) -> str:
    """`text` quoted for a message: control characters escaped, long text cut."""
    if len(text) > limit:
        return repr(text[:limit])[:-1] + f"…' (+{len(text) - limit:,} chars)"
    return repr(text)


def printable(text: str, limit: int = MAX_TEXT) -> str:
    """`text` with control characters, lone surrogates and other unprintables escaped.

    `repr`'s rule: `\\x1b` is shown as `\\x1b`, never sent to a terminal.
    """
    if len(text) > limit:
        text = text[:limit] + f"…(+{len(text) - limit:,} chars)"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def brief(obj: Any, limit: int = 200) -> str:
    """A short description of any value from a pickle, in bounded time whatever it holds.

    `repr` is never used on pickle objects: shared references make it exponential.
    """
    parts: list[str] = []
    _brief(obj, parts, 2)
    return printable("".join(parts), limit)


def _brief(obj: Any, out: list[str], depth: int) -> None:
    if isinstance(obj, str):
        out.append(shown(obj, 40))
    elif isinstance(obj, bool | float | complex) or obj is None:
        out.append(repr(obj))
    elif isinstance(obj, int):
        out.append(str(obj) if obj.bit_length() <= 64 else f"<{obj.bit_length()}-bit int>")
    elif isinstance(obj, bytes | bytearray):
        out.append(f"<{len(obj)} bytes>")
    elif isinstance(obj, list | tuple | dict | set | frozenset):
        _brief_items(obj, out, depth)
    else:
        out.append(f"<{type(obj).__name__}>")


def _brief_items(obj: Any, out: list[str], depth: int) -> None:
    name = type(obj).__name__
    if depth == 0 or not obj:
        out.append(f"<{name} of {len(obj)}>" if obj else f"{name}()")
        return
    values = list(obj.items() if isinstance(obj, dict) else obj)[:4]  # first few only
    out.append(f"{name}(")
    for i, value in enumerate(values):
        out.append(", " if i else "")
        _brief(value, out, depth - 1)
    out.append(f", … {len(obj) - len(values)} more)" if len(obj) > len(values) else ")")


def check_dims(dims: tuple[int, ...], what: str) -> tuple[int, ...]:
    """A shape or stride within torch's own bounds: at most 64 int64 dims."""
    if len(dims) > MAX_DIMS:
        raise Refused(f"a tensor {what} of {len(dims):,} dims", f"{MAX_DIMS} dims")
    for d in dims:
        if d > MAX_DIM:
            raise Refused(f"a tensor {what} dim of {brief(d)}", "torch's int64 range")
        if d < 0:
            raise OperationError(f"a tensor {what} dim of {d}: a negative size is corrupt")
    return dims


def check_numel(shape: tuple[int, ...]) -> None:
    """Refuse a shape whose element count passes int64, without computing a huge product."""
    if 0 in shape:
        return
    numel = 1
    for d in shape:
        numel *= d
        if numel > MAX_DIM:
            raise Refused(f"the element count of shape {brief(list(shape))}", "2**63-1")


@contextmanager
def printable_errors(path: Path) -> Iterator[None]:
    """Escape the file and key names quoted by an error raised inside, once, here."""
    # Messages quote file and key names, which may hold terminal escapes: escape them once here.
    try:
        yield
    except EnvlockError as exc:
        exc.message = printable(exc.message, 2000)
        exc.args = (exc.message,)
        raise
    except OSError as exc:  # unreadable, vanished, a directory where a file was expected
        where = printable(str(exc.filename or path), 2000)
        raise OperationError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
