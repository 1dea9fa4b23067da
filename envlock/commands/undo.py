"""Putting back what a command wrote when the step after the writes fails.

`envlock add -y` writes the profile and its lock, then applies them. If that apply fails
(a full disk, a wheel that does not install), the files would claim a change the root never
got, and nothing would say so. Here the files are put back as they were found, and the
failure's message says which were and how to carry the change out once the cause is fixed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from envlock import ui
from envlock.base.pairs import write_together
from envlock.errors import EnvlockError


@dataclass(frozen=True)
class Written:
    """A file a command wrote: what it held before (None: it did not exist) and now."""

    path: Path
    before: bytes | None
    after: bytes
    mode: int = 0o644

    def unrestorable(self) -> str | None:
        """Why `before` cannot be restored: the file is no longer what was written (someone
        edited it meanwhile: their edit wins) or cannot be read; None: it can (or it holds
        `before` already: it was never written)."""
        try:
            # own: the file envlock just wrote
            now = self.path.read_bytes() if self.path.exists() else None
        except OSError as exc:
            return f"could not be put back: {exc.strerror or exc}"
        if now not in (self.after, self.before):
            return "changed since envlock wrote it, so left as it is"
        return None


@contextlib.contextmanager
def undone_on_failure(written: list[Written], step: str, then: str) -> Iterator[None]:
    """Run `step` (e.g. "the apply"); if it fails, put `written` back and say so on the
    failure, with `then` (what to do next); its exit code and error are kept. A step that
    exits 0 is no failure."""
    try:
        yield
    except BaseException as exc:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        note = put_back_all(written, step, then)
        if isinstance(exc, EnvlockError):
            # The CLI prints the error last; the note belongs under it, not above.
            exc.hint = f"{exc.hint}\n  {note}" if exc.hint else note
        else:
            ui.info(f"envlock: {note}")
        raise


def put_back_all(written: list[Written], step: str, then: str) -> str:
    """Restore each file; one sentence on what was restored, what was not, and what next."""
    restored, kept, back = [], [], []
    for item in written:
        why = item.unrestorable()
        if why is None:
            back.append(item)
        else:
            kept.append(f"{item.path.name} {why}")
    try:
        # Together, as they were written (envlock/base/pairs.py): never half put back.
        if back:
            write_together([(i.path, i.before, i.mode) for i in back], f"undo of {step}")
        restored = [item.path.name for item in back]
    except OSError as exc:
        kept += [f"{i.path.name} could not be put back: {exc.strerror or exc}" for i in back]
    parts = []
    if restored:
        verb = "is" if len(restored) == 1 else "are"
        parts.append(f"{step} failed, so {' and '.join(restored)} {verb} back as before")
    if kept:
        parts.append(("not restored: " if restored else f"{step} failed; ") + "; ".join(kept))
    parts.append(then)
    return "; ".join(parts)
