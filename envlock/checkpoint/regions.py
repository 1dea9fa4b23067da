"""Which elements of each storage the tensors counted so far cover.

Views of one storage (`w`, `w[0]` and `w.t()` saved together; a fused qkv weight and its q, k
and v slices) hold its elements once. A strided view's elements are runs of consecutive
elements: `w[:, :8]` of a [1024, 64] matrix is 1024 runs of 8. Each storage keeps the union of
the runs counted so far, so a tensor adds exactly the elements no earlier tensor covered,
whatever the order. Enumerating runs costs time and memory: a budget of runs (limits.py)
bounds them, and past it tensors are counted whole (`approximate` says so) rather than the
file refused: the count is all that is at stake.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from math import prod


class Regions:
    """The covered runs of each storage, as sorted disjoint [begin, end) element intervals."""

    def __init__(self, budget: int) -> None:
        self.left = budget
        self.approximate = False
        self._covered: dict[object, list[tuple[int, int]]] = {}

    def add(
        self, storage: object, offset: int, shape: tuple[int, ...], stride: tuple[int, ...]
    ) -> int:
        """How many of this view's elements no view of `storage` added before covers."""
        if 0 in shape:
            return 0
        dims = [(d, s) for d, s in zip(shape, stride, strict=False) if d > 1 and s != 0]
        if any(s < 0 for _, s in dims):  # torch writes no negative strides: count it whole
            return prod(shape)
        run, outer = _runs(dims)
        covered = self._covered.setdefault(storage, [])
        cost = prod(d for d, _ in outer) + len(covered)  # the runs made, the runs merged
        if cost > self.left:
            self.approximate = True
            return prod(shape)
        self.left -= cost
        mine = _union([(b, b + run) for b in _starts(offset, outer)])
        added = sum(e - b for b, e in mine) - sum(_overlap(covered, b, e) for b, e in mine)
        self._covered[storage] = _union(covered + mine)
        return added


def distinct(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a view's elements are all different ones (no expanded or overlapping dims)."""
    dims = sorted((s, d) for d, s in zip(shape, stride, strict=False) if d > 1)
    reach = 1  # each dim must step past everything the smaller dims reach
    for s, d in dims:
        if s < reach:
            return False
        reach = s * d
    return True


def _runs(dims: list[tuple[int, int]]) -> tuple[int, list[tuple[int, int]]]:
    # Innermost first: dims whose stride continues the run so far extend it (w.t()'s two dims
    # make one run of 100); the rest say where the runs start.
    dims = sorted(dims, key=lambda ds: ds[1])
    run = 1
    while dims and dims[0][1] == run:
        run *= dims.pop(0)[0]
    return run, dims


def _starts(offset: int, outer: list[tuple[int, int]]) -> list[int]:
    starts = [offset]
    for size, stride in outer:
        starts = [s + i * stride for i in range(size) for s in starts]
    return starts


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for b, e in sorted(intervals):
        if merged and b <= merged[-1][1]:
            if e > merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
        else:
            merged.append((b, e))
    return merged


def _overlap(covered: list[tuple[int, int]], begin: int, end: int) -> int:
    # covered is sorted and disjoint: only the intervals ending after begin and starting
    # before end can overlap [begin, end).
    first = bisect_right(covered, (begin, begin))
    first = max(0, first - 1)
    last = bisect_left(covered, (end, end))
    return sum(max(0, min(end, e) - max(begin, b)) for b, e in covered[first:last])
