"""A pickle's bytes read twice, a chunk at a time: what the scan passed is what is unpickled.

The scan (scan.py) reads the pickle once, in chunks, and `Recorded` keeps the sha256 of each;
the unpickler then reads it again through `verified`, which checks every chunk against its
digest before handing on a byte of it. So neither reading holds the whole pickle (a 256 MiB
pickle costs a chunk, not 256 MiB), and a file changed between the two readings (by another
user, while root reads it) is refused rather than unpickled unscanned.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Iterator
from typing import Any

from envlock.base.limits import MiB

CHUNK = MiB  # bytes of a pickle read at a time
# The pickle's bytes from its start, in chunks of CHUNK (the last shorter), counted and
# checked as they are read (archive.py); called once per reading.
Opener = Callable[[], Iterator[bytes]]


class Changed(OSError):
    """The pickle read again is not the one the scan passed."""


class Recorded:
    """The chunks of one reading, each one's sha256 kept as it goes by."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self.digests: list[bytes] = []

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self.digests.append(hashlib.sha256(chunk).digest())
            yield chunk


class _Verified(io.RawIOBase):
    """The chunks of a second reading, each checked against the first's before it is read."""

    def __init__(self, chunks: Iterator[bytes], digests: list[bytes]) -> None:
        self._chunks, self._digests = chunks, digests
        self._chunk, self._at, self._index = b"", 0, 0

    def readable(self) -> bool:
        return True

    def readinto(self, into: Any) -> int:
        if self._at >= len(self._chunk):
            # Past the chunks the scan read (it stopped at STOP): bytes after the pickle,
            # never unpickled; an unpickler that asks for them meets the end of its file.
            chunk = next(self._chunks, b"") if self._index < len(self._digests) else b""
            if not chunk:
                return 0
            if hashlib.sha256(chunk).digest() != self._digests[self._index]:
                raise Changed("the pickle changed since it was scanned")
            self._chunk, self._at, self._index = chunk, 0, self._index + 1
        size = min(len(into), len(self._chunk) - self._at)
        into[:size] = self._chunk[self._at : self._at + size]
        self._at += size
        return size


def verified(chunks: Iterator[bytes], digests: list[bytes]) -> io.BufferedReader:
    """A file of the chunks read again, each the same as the scan's (else `Changed`)."""
    return io.BufferedReader(_Verified(chunks, digests), buffer_size=CHUNK)


def of_bytes(data: bytes) -> Opener:
    """Bytes already in memory (a raw pickle, a DCP blob), read as chunks alike."""
    return lambda: (data[at : at + CHUNK] for at in range(0, len(data), CHUNK))
