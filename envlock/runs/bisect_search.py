"""Bisect's search: delta debugging (Zeller's ddmin) over the differences, with measurement
that survives noise. Pure but for the `Lab` it is given, which builds and runs a probe:
tests drive it with a simulated lab, `envlock bisect` with real generations (bisect_lab.py).

A probe's result is the command's exit status (0 good, 125 skip, any other bad, as
`git bisect run`) or a metric judged against a threshold between the two ends (halfway
unless given). A metric probe runs the command `repeat` times, then one of the two ends
in turn, so that a machine getting slower shows in the ends too. A probe
whose values fall on both sides of the threshold is measured again once; still so, it is
inconclusive: the search goes on, but its answer is then called inconclusive, never judged.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

GOOD, BAD, SKIP, UNRESOLVED, INCONCLUSIVE = "good", "bad", "skip", "unresolved", "inconclusive"
# The search's answers.
FOUND, NO_ANSWER, NOTHING = "found", "inconclusive", "nothing-to-bisect"
SKIP_STATUS = 125


class Lab(Protocol):
    def prepare(self, chosen: frozenset[int]) -> str | None:
        """Make the probe of GOOD + `chosen` ready; None, or why it cannot be built."""

    def measure(self, chosen: frozenset[int]) -> float:
        """Run the command once in that probe: its metric, or its exit status."""

    def built(self, chosen: frozenset[int]) -> tuple[str | None, bool]:
        """The probe's generation, and whether this bisect built it."""


@dataclass(frozen=True)
class Settings:
    metric: bool  # False: the exit status decides
    repeat: int = 3
    threshold: float | None = None


# -- delta debugging -----------------------------------------------------------------------
def ddmin(n: int, test: Callable[[frozenset[int]], str]) -> frozenset[int]:
    """A 1-minimal subset of 0..n-1 whose probe is BAD, given that all of them is. Only BAD
    narrows: good, skipped, unresolved and inconclusive probes make it split finer."""
    current = list(range(n))
    granularity = 2
    while len(current) >= 2:
        chunks = split(current, granularity)
        found = first_bad(test, chunks)
        if found is not None:
            current, granularity = found, 2
            continue
        if granularity > 2:  # with two chunks, each is the other's complement
            found = first_bad(test, [[i for i in current if i not in c] for c in chunks])
            if found is not None:
                current, granularity = found, max(granularity - 1, 2)
                continue
        if granularity >= len(current):
            break
        granularity = min(granularity * 2, len(current))
    return frozenset(current)


def split(items: list[int], parts: int) -> list[list[int]]:
    size, extra = divmod(len(items), parts)
    chunks, start = [], 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        chunks.append(items[start:end])
        start = end
    return [c for c in chunks if c]


def first_bad(test: Callable[[frozenset[int]], str], sets: list[list[int]]) -> list[int] | None:
    return next((s for s in sets if test(frozenset(s)) == BAD), None)


def single_cause_builds(n: int) -> int:
    """The builds a single cause among n differences takes at most: 2⌈log2 n⌉ + 2."""
    return 2 * math.ceil(math.log2(n)) + 2 if n > 1 else 2


# -- judging -------------------------------------------------------------------------------
def judge_status(codes: list[float]) -> str:
    counted = [c for c in codes if c != SKIP_STATUS]
    if not counted:
        return SKIP
    sides = {GOOD if c == 0 else BAD for c in counted}
    return sides.pop() if len(sides) == 1 else INCONCLUSIVE


def judge_metric(values: list[float], good: float, bad: float, threshold: float | None) -> str:
    """GOOD or BAD when every value lies on that side of the threshold, else inconclusive."""
    if good == bad:
        return INCONCLUSIVE
    cut = threshold if threshold is not None else (good + bad) / 2
    lower_is_bad = bad < good
    sides = {BAD if (v < cut) == lower_is_bad and v != cut else GOOD for v in values}
    return sides.pop() if len(sides) == 1 else INCONCLUSIVE


@dataclass(frozen=True)
class Summary:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> Summary | None:
        return cls(statistics.median(values), min(values), max(values)) if values else None

    @property
    def spread(self) -> float:
        """Half the range, relative to the median (0.02: ±2%)."""
        return (self.high - self.low) / 2 / abs(self.median) if self.median else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "spread": round(self.spread, 4),
        }


# -- the search ----------------------------------------------------------------------------
@dataclass
class Probe:
    number: int
    chosen: frozenset[int]
    outcome: str = ""
    values: list[float] = field(default_factory=list)
    seconds: float = 0.0
    generation: str | None = None
    built: bool = False
    note: str = ""

    def to_json(self, keys: list[str]) -> dict[str, Any]:
        summary = Summary.of(self.values)
        return {
            "number": self.number,
            "changes": [keys[i] for i in sorted(self.chosen)],
            "outcome": self.outcome,
            "values": self.values,
            "summary": summary.to_json() if summary else None,
            "seconds": round(self.seconds, 3),
            "generation": self.generation,
            "built": self.built,
            "note": self.note or None,
        }


@dataclass
class Answer:
    status: str
    reason: str
    cause: frozenset[int] = frozenset()
    probes: list[Probe] = field(default_factory=list)
    good_end: list[float] = field(default_factory=list)
    bad_end: list[float] = field(default_factory=list)
    threshold: float | None = None
    alone: Probe | None = None  # GOOD with the cause alone
    rest: Probe | None = None  # GOOD with everything else of BAD

    @property
    def builds(self) -> int:
        return sum(p.built for p in self.probes)


Progress = Callable[[str], None]


class Search:
    """One bisect: the two ends, ddmin over the differences, the evidence for the answer."""

    def __init__(
        self,
        lab: Lab,
        n: int,
        settings: Settings,
        progress: Progress | None = None,
        names: list[str] | None = None,
    ):
        self.lab, self.n, self.settings = lab, n, settings
        self.names = names or [str(i) for i in range(n)]
        self.progress = progress or (lambda text: None)
        self.probes: dict[frozenset[int], Probe] = {}
        self.ends: dict[str, list[float]] = {GOOD: [], BAD: []}
        self.turn = 0  # which end the next interleaved run measures
        self.unsure: list[Probe] = []

    def run(self) -> Answer:
        if self.n == 0:
            return Answer(NOTHING, "nothing differs that bisect can reproduce")
        self.ready(frozenset())
        self.ready(frozenset(range(self.n)))
        ends = self.measure_ends()
        if ends:
            return self.answer(NO_ANSWER, ends)
        cause = ddmin(self.n, lambda chosen: self.probe(chosen).outcome)
        alone = self.probe(cause)
        rest_set = frozenset(range(self.n)) - cause
        rest = self.probe(rest_set) if rest_set else None
        if self.unsure:
            numbers = ", ".join(str(p.number) for p in self.unsure)
            why = f"probe(s) {numbers} could not be judged (their values straddle the threshold)"
            return self.answer(NO_ANSWER, why, cause, alone, rest)
        if alone.outcome != BAD:
            return self.answer(NO_ANSWER, "no set of the differences reproduced BAD", cause)
        return self.answer(FOUND, "", cause, alone, rest)

    def answer(
        self,
        status: str,
        reason: str,
        cause: frozenset[int] = frozenset(),
        alone: Probe | None = None,
        rest: Probe | None = None,
    ) -> Answer:
        # The ends' probes hold every value measured of them, interleaved ones included.
        self.record(frozenset()).values = list(self.ends[GOOD])
        self.record(frozenset(range(self.n))).values = list(self.ends[BAD])
        probes = sorted(self.probes.values(), key=lambda p: p.number)
        return Answer(
            status,
            reason,
            cause,
            probes,
            list(self.ends[GOOD]),
            list(self.ends[BAD]),
            self.cut(),
            alone,
            rest,
        )

    def ready(self, chosen: frozenset[int]) -> None:
        """An end: it must build (each is a side's own lock)."""
        probe = self.record(chosen)
        why = self.lab.prepare(chosen)
        if why is not None:
            from envlock.errors import OperationError

            raise OperationError(f"bisect: an end could not be built: {why}")
        probe.generation, probe.built = self.lab.built(chosen)
        probe.outcome = GOOD if not chosen else BAD

    def record(self, chosen: frozenset[int]) -> Probe:
        if chosen not in self.probes:
            self.probes[chosen] = Probe(len(self.probes) + 1, chosen)
        return self.probes[chosen]

    # -- the ends ------------------------------------------------------------------------
    def measure_ends(self) -> str:
        """Measure both ends `repeat` times each; why they do not separate ("" when they do)."""
        everything = frozenset(range(self.n))
        for _ in range(2):
            # Each end's runs back to back: one switch of generation each.
            self.ends[GOOD] += [self.lab.measure(frozenset()) for _ in range(self.settings.repeat)]
            self.ends[BAD] += [self.lab.measure(everything) for _ in range(self.settings.repeat)]
            why = self.ends_apart()
            if not why or not self.settings.metric:
                break
            self.progress(f"the ends overlap ({why}): measuring them again")
        if not why:
            self.say_ends()
        return why

    def ends_apart(self) -> str:
        good, bad = self.ends[GOOD], self.ends[BAD]
        if not self.settings.metric:
            if judge_status(good) != GOOD or judge_status(bad) != BAD:
                return (
                    f"CMD's exit statuses do not differ as GOOD 0, BAD non-zero: GOOD {good}, "
                    f"BAD {bad}"
                )
            return ""
        g, b = statistics.median(good), statistics.median(bad)
        t = self.settings.threshold
        if judge_metric(good, g, b, t) != GOOD or judge_metric(bad, g, b, t) != BAD:
            return f"GOOD {describe(good)}, BAD {describe(bad)}, threshold {fmt(self.cut())}"
        return ""

    def say_ends(self) -> None:
        good, bad = self.ends[GOOD], self.ends[BAD]
        if self.settings.metric:
            self.progress(
                f"ends: GOOD {describe(good)}, BAD {describe(bad)}; threshold {fmt(self.cut())}"
            )
        else:
            self.progress("ends: GOOD exits 0, BAD exits non-zero")

    def cut(self) -> float | None:
        if not self.settings.metric or not self.ends[GOOD] or not self.ends[BAD]:
            return None
        if self.settings.threshold is not None:
            return self.settings.threshold
        return (statistics.median(self.ends[GOOD]) + statistics.median(self.ends[BAD])) / 2

    # -- a probe -------------------------------------------------------------------------
    def probe(self, chosen: frozenset[int]) -> Probe:
        probe = self.record(chosen)
        if probe.outcome:
            return probe
        started = time.perf_counter()
        self.progress(
            f"probe {probe.number} of at most {single_cause_builds(self.n)} for a single cause: "
            f"{len(chosen)} of {self.n} applied ({self.named(chosen)})"
        )
        why = self.lab.prepare(chosen)
        probe.generation, probe.built = self.lab.built(chosen)
        if why is not None:
            probe.outcome, probe.note = UNRESOLVED, why
        else:
            probe.outcome = self.measured(probe)
            if probe.outcome == INCONCLUSIVE:
                self.unsure.append(probe)
        probe.seconds = time.perf_counter() - started
        self.progress(
            f"probe {probe.number}: {probe.outcome}"
            + (f", {describe(probe.values)}" if self.settings.metric and probe.values else "")
            + f" ({probe.seconds:.1f}s)"
        )
        return probe

    def named(self, chosen: frozenset[int], shown: int = 4) -> str:
        names = [self.names[i] for i in sorted(chosen)]
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        return ", ".join(names[:shown]) + more

    def measured(self, probe: Probe) -> str:
        """The probe's runs back to back, then (with a metric) one run of an end, each end in
        turn: the ends are measured all along the search, in the same conditions."""
        for _ in range(2):  # measured again once when it straddles the threshold
            probe.values += [self.lab.measure(probe.chosen) for _ in range(self.settings.repeat)]
            if self.settings.metric:
                self.interleaved_end()
            outcome = self.judged(probe.values)
            if outcome != INCONCLUSIVE:
                return outcome
        return INCONCLUSIVE

    def interleaved_end(self) -> None:
        end = (GOOD, BAD)[self.turn % 2]
        self.turn += 1
        chosen = frozenset() if end == GOOD else frozenset(range(self.n))
        self.ends[end].append(self.lab.measure(chosen))

    def judged(self, values: list[float]) -> str:
        if not self.settings.metric:
            return judge_status(values)
        good, bad = statistics.median(self.ends[GOOD]), statistics.median(self.ends[BAD])
        return judge_metric(values, good, bad, self.settings.threshold)


def describe(values: list[float]) -> str:
    summary = Summary.of(values)
    if summary is None:
        return "no values"
    return f"{fmt(summary.median)} ±{summary.spread:.0%}"


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"
