"""Bisect's pure core, table-driven: the change set (runs/bisect.py), delta debugging and the
judgement of measurements (runs/bisect_search.py) over a simulated lab, and the lab's own
pure helpers (the mixed lock's text, uv's output, the metric line)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from envlock.commands.bisect import mapped_config, mapped_data
from envlock.errors import UsageError
from envlock.lock.read import parse_lock
from envlock.runs.bisect import (
    Difference,
    cache_difference,
    config_variable,
    env_differences,
    merged,
    neighbours,
    package_differences,
    pins,
    recipe,
)
from envlock.runs.bisect_inputs import (
    End,
    metric_of,
    mixed_text,
    not_tried,
    package_blocks,
    parse_compiled,
)
from envlock.runs.bisect_search import (
    BAD,
    FOUND,
    GOOD,
    INCONCLUSIVE,
    NO_ANSWER,
    NOTHING,
    SKIP,
    Search,
    Settings,
    ddmin,
    judge_metric,
    judge_status,
    single_cause_builds,
)


# -- the change set ------------------------------------------------------------------------
def keys(differences: list[Difference]) -> list[list[str]]:
    return [sorted(m.name for m in d.moves) for d in differences]


@pytest.mark.parametrize(
    ("good", "bad", "needs_good", "needs_bad", "units"),
    [
        # Each move its own difference.
        ({"a": "1", "b": "1"}, {"a": "2", "b": "2"}, {}, {}, [["a"], ["b"]]),
        # A torch build and its CUDA libraries (and triton): one change.
        (
            {"torch": "2.11.0+cu128", "nvidia-cublas-cu12": "12.8", "triton": "3.5", "x": "1"},
            {"torch": "2.11.0+cu130", "nvidia-cublas": "13.1", "triton": "3.6", "x": "2"},
            {},
            {},
            [["nvidia-cublas", "nvidia-cublas-cu12", "torch", "triton"], ["x"]],
        ),
        # A package moves with the new dependency it pulls in...
        ({"b": "1"}, {"b": "2", "newdep": "1"}, {}, {"newdep": {"b"}}, [["b", "newdep"]]),
        # ...and with the old one it no longer needs.
        ({"b": "1", "olddep": "1"}, {"b": "2"}, {"olddep": {"b"}}, {}, [["b", "olddep"]]),
        # A package added at the top level is its own difference.
        ({"a": "1"}, {"a": "1", "extra": "1"}, {}, {}, [["extra"]]),
        # Nothing moved: nothing to try.
        ({"a": "1"}, {"a": "1"}, {}, {}, []),
    ],
)
def test_package_units(
    good: dict[str, str],
    bad: dict[str, str],
    needs_good: dict[str, set[str]],
    needs_bad: dict[str, set[str]],
    units: list[list[str]],
) -> None:
    assert keys(package_differences(good, bad, needs_good, needs_bad)) == units


def test_a_torch_build_is_labelled_as_one() -> None:
    [unit] = package_differences(
        {"torch": "2.11.0+cu128", "nvidia-cublas-cu12": "12.8"},
        {"torch": "2.11.0+cu130", "nvidia-cublas": "13.1"},
    )
    assert unit.label == "torch build 2.11.0+cu128 → 2.11.0+cu130 (with 2 of its libraries)"
    assert unit.key == "packages:torch"


def test_units_tied_by_a_requirement_merge() -> None:
    good, bad = {"c": "1", "d": "1", "e": "1"}, {"c": "2", "d": "2", "e": "2"}
    units = package_differences(good, bad)
    c = units[0]
    # c 2.0 needs d (BAD's edges); nobody needs e.
    assert neighbours(c, units, {"d": {"c"}}, {"d": {"c"}}) == ["packages:d"]
    assert neighbours(units[2], units, {"d": {"c"}}, {}) == []
    joined = merged(units, ["packages:c", "packages:d"])
    assert keys(joined) == [["c", "d"], ["e"]]
    assert joined[0].label == "c 1 → 2 with d 1 → 2"


@pytest.mark.parametrize(
    ("good", "bad", "labels"),
    [
        ({"OMP_NUM_THREADS": "8"}, {"OMP_NUM_THREADS": "4"}, ["OMP_NUM_THREADS: 8 → 4"]),
        ({}, {"NCCL_ALGO": "ring"}, ["NCCL_ALGO: (unset) → ring"]),
        ({"NCCL_ALGO": "ring"}, {}, ["NCCL_ALGO: ring → (unset)"]),
        ({"A": "1"}, {"A": "1"}, []),
    ],
)
def test_env_differences(good: dict[str, str], bad: dict[str, str], labels: list[str]) -> None:
    assert [d.label for d in env_differences(good, bad)] == labels


@pytest.mark.parametrize(
    ("good", "bad", "label"),
    [(True, False, "compile cache warm → cold"), (False, True, "compile cache cold → warm")],
)
def test_cache_warmth_is_one_difference(good: bool, bad: bool, label: str) -> None:
    assert [d.label for d in cache_difference(good, bad)] == [label]


@pytest.mark.parametrize(("good", "bad"), [(True, True), (None, False), (False, None)])
def test_cache_warmth_unknown_or_equal_is_no_difference(
    good: bool | None, bad: bool | None
) -> None:
    assert cache_difference(good, bad) == []


@pytest.mark.parametrize(
    ("key", "variable"), [("token_budget", "TOKEN_BUDGET"), ("model.lr", "MODEL_LR")]
)
def test_config_variable(key: str, variable: str) -> None:
    assert config_variable(key) == variable


def test_a_recipe_is_good_with_the_chosen_differences() -> None:
    differences = [
        *package_differences(
            {"a": "1", "b": "1"}, {"a": "2", "b": "2", "new": "1"}, {}, {"new": {"b"}}
        ),
        *env_differences({"OMP_NUM_THREADS": "8"}, {}),
        *cache_difference(True, False),
    ]
    assert [d.kind for d in differences] == ["packages", "packages", "env", "cache"]
    none = recipe(differences, frozenset())
    assert none.bad_packages == frozenset() and not none.cold_cache
    assert none.env == (("OMP_NUM_THREADS", "8"),)
    some = recipe(differences, frozenset({1, 2, 3}))
    assert some.bad_packages == {"b", "new"} and some.cold_cache
    assert some.env == (("OMP_NUM_THREADS", None),)
    good, bad = {"a": "1", "b": "1"}, {"a": "2", "b": "2", "new": "1"}
    assert pins(good, bad, some.bad_packages) == {"a": "1", "b": "2", "new": "1"}
    assert pins(good, bad, frozenset({"gone"})) == {"a": "1", "b": "1"}


# -- delta debugging -----------------------------------------------------------------------
def counting(bad: Callable[[frozenset[int]], bool]) -> tuple[list[frozenset[int]], Callable]:
    seen: list[frozenset[int]] = []

    def test(chosen: frozenset[int]) -> str:
        if chosen not in seen:
            seen.append(chosen)
        return BAD if bad(chosen) else GOOD

    return seen, test


@pytest.mark.parametrize("n", [2, 3, 7, 8, 32, 128])
@pytest.mark.parametrize("where", [0, -1, "middle"])
def test_ddmin_finds_a_single_cause_within_the_bound(n: int, where: int | str) -> None:
    cause = n // 2 if where == "middle" else range(n)[where]  # type: ignore[index]
    seen, test = counting(lambda chosen: cause in chosen)
    assert ddmin(n, test) == {cause}
    # Probes besides the two ends: at most 2 per halving.
    assert len(seen) <= 2 * math.ceil(math.log2(n))
    assert single_cause_builds(n) == 2 * math.ceil(math.log2(n)) + 2


@pytest.mark.parametrize(("n", "pair"), [(2, {0, 1}), (7, {1, 5}), (16, {0, 15}), (9, {3, 4})])
def test_ddmin_finds_a_pair_that_is_bad_only_together(n: int, pair: set[int]) -> None:
    _, test = counting(lambda chosen: pair <= chosen)
    assert ddmin(n, test) == pair


def test_ddmin_splits_what_does_not_resolve() -> None:
    """A set holding 2 without 3 does not resolve: never judged, the search goes finer."""

    def test(chosen: frozenset[int]) -> str:
        if 2 in chosen and 3 not in chosen:
            return "unresolved"
        return BAD if 5 in chosen else GOOD

    assert ddmin(8, test) == {5}


# -- judging -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "good", "bad", "threshold", "outcome"),
    [
        ([990, 1010], 1000, 500, None, GOOD),
        ([490, 520], 1000, 500, None, BAD),
        ([700, 800], 1000, 500, None, INCONCLUSIVE),  # straddles 750
        ([760, 800], 1000, 500, None, GOOD),
        ([760, 800], 1000, 500, 900, BAD),  # the user's threshold
        ([2.1, 2.0], 1.0, 2.0, None, BAD),  # seconds: higher is worse
        ([1.0], 1.0, 1.0, None, INCONCLUSIVE),  # the ends do not differ
    ],
)
def test_judge_metric(
    values: list[float], good: float, bad: float, threshold: float | None, outcome: str
) -> None:
    assert judge_metric(values, good, bad, threshold) == outcome


@pytest.mark.parametrize(
    ("codes", "outcome"),
    [([0, 0], GOOD), ([1, 3], BAD), ([0, 1], INCONCLUSIVE), ([125, 125], SKIP), ([125, 1], BAD)],
)
def test_judge_status(codes: list[float], outcome: str) -> None:
    assert judge_status(codes) == outcome


# -- the search over a simulated lab -------------------------------------------------------
class SimulatedLab:
    """Builds nothing: a probe's value is `value(chosen)` plus seeded noise; a package set
    counts as one build the first time it is prepared."""

    def __init__(
        self,
        value: Callable[[frozenset[int]], float],
        noise: float = 0.0,
        unresolved: Callable[[frozenset[int]], bool] = lambda chosen: False,
    ) -> None:
        self.value, self.noise, self.unresolved = value, noise, unresolved
        self.rng = random.Random(7)
        self.prepared: set[frozenset[int]] = set()
        self.runs = 0

    def prepare(self, chosen: frozenset[int]) -> str | None:
        if self.unresolved(chosen):
            return "does not resolve"
        self.prepared.add(chosen)
        return None

    def built(self, chosen: frozenset[int]) -> tuple[str | None, bool]:
        return (None, chosen in self.prepared)

    def measure(self, chosen: frozenset[int]) -> float:
        self.runs += 1
        return self.value(chosen) + self.rng.uniform(-1, 1) * self.noise


def tok_s(*causes: int) -> Callable[[frozenset[int]], float]:
    return lambda chosen: 500.0 if set(causes) <= chosen else 1000.0


@pytest.mark.parametrize("n", [1, 5, 8, 32, 128])
def test_a_single_cause_is_found_within_the_bound(n: int) -> None:
    lab = SimulatedLab(tok_s(n - 1), noise=20)
    answer = Search(lab, n, Settings(metric=True)).run()
    assert answer.status == FOUND
    assert answer.cause == {n - 1}
    assert answer.builds <= single_cause_builds(n) + 1  # + the evidence: all but the cause
    assert answer.alone is not None and answer.alone.outcome == BAD
    assert n == 1 or (answer.rest is not None and answer.rest.outcome == GOOD)
    # Interleaved: the ends were measured while the probes were.
    assert n == 1 or (len(answer.good_end) > 3 and len(answer.bad_end) > 3)
    assert answer.probes[0].values == answer.good_end


def test_a_pair_slow_only_together_is_found() -> None:
    answer = Search(SimulatedLab(tok_s(2, 6)), 8, Settings(metric=True)).run()
    assert (answer.status, answer.cause) == (FOUND, {2, 6})


def test_noise_larger_than_half_the_gap_is_inconclusive_not_wrong() -> None:
    for seed in range(20):
        lab = SimulatedLab(tok_s(3), noise=400)
        lab.rng = random.Random(seed)
        answer = Search(lab, 8, Settings(metric=True)).run()
        assert answer.status == NO_ANSWER, seed
        assert answer.reason


def test_noise_below_the_margin_is_judged() -> None:
    answer = Search(SimulatedLab(tok_s(3), noise=100), 8, Settings(metric=True)).run()
    assert (answer.status, answer.cause) == (FOUND, {3})


def test_a_straddling_probe_is_measured_again_then_called_inconclusive() -> None:
    """Probe {0..3} gives values on both sides of the threshold every time."""
    flip = iter(range(10_000))

    def value(chosen: frozenset[int]) -> float:
        if chosen == frozenset(range(4)):
            return 500.0 if next(flip) % 2 else 1000.0
        return tok_s(6)(chosen)

    lab = SimulatedLab(value)
    answer = Search(lab, 8, Settings(metric=True, repeat=3)).run()
    straddling = next(p for p in answer.probes if p.chosen == frozenset(range(4)))
    assert straddling.outcome == INCONCLUSIVE and len(straddling.values) == 6
    assert answer.status == NO_ANSWER and "could not be judged" in answer.reason


def test_exit_statuses_decide_without_a_metric() -> None:
    lab = SimulatedLab(lambda chosen: 1.0 if 4 in chosen else 0.0)
    answer = Search(lab, 6, Settings(metric=False, repeat=2)).run()
    assert (answer.status, answer.cause) == (FOUND, {4})


def test_ends_that_do_not_differ_give_no_answer() -> None:
    answer = Search(SimulatedLab(lambda chosen: 0.0), 4, Settings(metric=False)).run()
    assert answer.status == NO_ANSWER and "do not differ" in answer.reason


def test_nothing_to_try() -> None:
    assert Search(SimulatedLab(tok_s(0)), 0, Settings(metric=True)).run().status == NOTHING


def test_unresolvable_probes_are_reported_not_judged() -> None:
    lab = SimulatedLab(tok_s(5), unresolved=lambda chosen: 2 in chosen and 3 not in chosen)
    answer = Search(lab, 8, Settings(metric=True)).run()
    assert (answer.status, answer.cause) == (FOUND, {5})
    skipped = [p for p in answer.probes if p.outcome == "unresolved"]
    assert all(p.note == "does not resolve" and not p.values for p in skipped)


# -- the lab's pure helpers ----------------------------------------------------------------
LOCK_HEAD = 'lock-version = "1.0"\ncreated-by = "uv"\nrequires-python = ">=3.11"\n\n'
LOCK_TAIL = (
    '[tool.envlock]\nformat = 2\nprofile = "p"\npython-version = "3.11"\n'
    'python-platform = "x86_64-manylinux_2_28"\ntorch-backend = ""\ntorch = ""\n'
)


def lock_text(versions: dict[str, str]) -> str:
    blocks = "".join(
        f'[[packages]]\nname = "{name}"\nversion = "{version}"\n'
        f'wheels = [{{ url = "https://files.example/{name}-{version}-py3-none-any.whl", '
        f'hashes = {{ sha256 = "{(name + version).encode().hex().ljust(64, "0")[:64]}" }} }}]\n\n'
        for name, version in sorted(versions.items())
    )
    return LOCK_HEAD + blocks + LOCK_TAIL


def test_a_mixed_lock_takes_the_chosen_packages_from_bad(tmp_path: Path) -> None:
    good = parse_lock(tmp_path / "pylock.good.toml", lock_text({"a": "1", "b": "1", "gone": "1"}))
    bad = parse_lock(tmp_path / "pylock.bad.toml", lock_text({"a": "2", "b": "2", "new": "1"}))
    head, blocks, tail = package_blocks(good.text)
    assert head == LOCK_HEAD and tail == LOCK_TAIL and sorted(blocks) == ["a", "b", "gone"]
    text = mixed_text(good, bad, frozenset({"b", "new", "gone"}))
    mixed = parse_lock(tmp_path / "pylock.mixed.toml", text)  # the validator reads it whole
    assert mixed.versions() == {"a": "1", "b": "2", "new": "1"}
    assert mixed.meta == good.meta


def test_uv_s_output_gives_versions_and_who_needs_whom() -> None:
    text = (
        "newdep==1.0               # via pkgb, -r probe.in\n"
        "pkgb==2.0                 # via -r probe.in\n"
        "torch==2.11.0+cu128       # via -r probe.in\n"
    )
    versions, needs = parse_compiled(text)
    assert versions == {"newdep": "1.0", "pkgb": "2.0", "torch": "2.11.0+cu128"}
    assert needs == {"newdep": {"pkgb"}, "pkgb": set(), "torch": set()}


@pytest.mark.parametrize(
    ("stdout", "value"),
    [
        ('{"tok_s": 1}\nnoise\n{"tok_s": 2.5, "step": 3}\n{"loss": 1}\n', 2.5),
        ('{"tok_s": true}\n', None),
        ("tok_s: 3\n{not json\n", None),
    ],
)
def test_the_metric_is_the_last_json_line_with_it(
    stdout: str, value: float | None, tmp_path: Path
) -> None:
    assert metric_of(stdout, "tok_s", tmp_path) == value


# -- what the user maps, and what is not tried --------------------------------------------
def end(tmp_path: Path, **fields: object) -> End:
    lock = parse_lock(tmp_path / "pylock.x.toml", lock_text({"a": "1"}))
    return End("x", lock, **fields)  # type: ignore[arg-type]


def test_data_maps_a_variable_to_each_side() -> None:
    [data] = mapped_data(("TRAIN_DATA=/d/v1,/d/v2",))
    assert (data.key, data.variable, data.good, data.bad) == (
        "data:TRAIN_DATA",
        "TRAIN_DATA",
        "/d/v1",
        "/d/v2",
    )
    assert mapped_data(("SAME=/d,/d",)) == []  # nothing differs


@pytest.mark.parametrize("item", ["TRAIN=/d/v1", "=a,b", "TRAIN=a,", "1X=a,b", "TRAIN"])
def test_a_malformed_data_mapping_is_a_usage_error(item: str) -> None:
    with pytest.raises(UsageError, match="expected NAME=PATH_A,PATH_B"):
        mapped_data((item,))


def test_config_values_come_from_the_snapshots(tmp_path: Path) -> None:
    good = end(tmp_path, config={"model.lr": 0.001, "seq": 2048}, is_run=True)
    bad = end(tmp_path, config={"model.lr": 0.003, "seq": 2048}, is_run=True)
    [lr] = mapped_config(("model.lr", "seq"), good, bad)
    assert (lr.variable, lr.good, lr.bad) == ("MODEL_LR", "0.001", "0.003")
    with pytest.raises(UsageError, match="neither snapshot's config has it"):
        mapped_config(("nope",), good, bad)
    with pytest.raises(UsageError, match="must both be snapshots"):
        mapped_config(("seq",), end(tmp_path), bad)


def test_what_no_probe_reproduces_is_said(tmp_path: Path) -> None:
    good = end(tmp_path, python="3.11", config={"lr": 1, "seq": 1, "bs": 1, "wd": 1, "x": 1})
    bad = end(
        tmp_path,
        python="3.12",
        scripts={"train.py": "ab"},
        env={"HF_TOKEN": "<redacted sha256:1a2b3c4d>"},
        config={"lr": 2, "seq": 2, "bs": 2, "wd": 2, "x": 2},
    )
    notes = not_tried(good, bad, {"lr"})
    assert notes[0] == "Python 3.11 → 3.12 (each probe keeps GOOD's)"
    assert notes[1].startswith("the scripts")
    assert notes[2] == "HF_TOKEN (recorded redacted)"
    assert notes[3] == "4 config value(s) (bs, seq, wd …): map one with --config KEY"
