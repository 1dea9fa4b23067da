"""The pure core, table-driven: hand-written states → drift → plan, with no target at all.

Start here. Each drift kind is produced from the smallest state that shows it, checked for
its place in the report order, and followed into the plan that repairs it. CLI scenario
tests elsewhere prove the whole; these prove each rule, in well under a second.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from envlock.base.drift_kinds import KIND, KINDS, ORDER, Drift, Repair, blocking
from envlock.errors import OperationError, UsageError
from envlock.lock.read import parse_lock
from envlock.reconcile.drift import Expectation, compute_drift
from envlock.reconcile.generations import plan_gc, plan_rollback, previous_generation
from envlock.reconcile.plan import make_plan
from envlock.reconcile.state import (
    CacheState,
    FileChange,
    FilesReport,
    Generation,
    GpuFacts,
    GpuLibrary,
    Hold,
    Host,
    ScriptsState,
    State,
    Switch,
    TorchBuild,
    Trust,
    UvState,
    VenvLink,
    parse_state,
)

ROOT = "/opt/envlock"
OTHERS = "/opt/envlock is owned by mallory (uid 1001), not by root"
VENV = "/opt/venv"
SCRIPT_SHA = "a" * 64
LOCK_TEXT = """lock-version = "1.0"
created-by = "test"

[[packages]]
name = "torch"
version = "2.11.0+cu128"

[[packages]]
name = "numpy"
version = "2.1.0"

[[packages]]
name = "nvidia-cudnn-cu12"
version = "9.1.0"

[tool.envlock]
python-version = "3.11"
"""


def with_wheels(text: str) -> str:
    """A hand-written lock made valid: a wheel (URL and sha256) for each package, since a
    lock is only read through its validator."""

    def wheel(match: re.Match[str]) -> str:
        name, version = match.group(1), match.group(2)
        sha = hashlib.sha256(f"{name}=={version}".encode()).hexdigest()
        url = f"https://files.test/{name.replace('-', '_')}-{version}-py3-none-any.whl"
        return f'{match.group(0)}wheels = [{{ url = "{url}", hashes = {{ sha256 = "{sha}" }} }}]\n'

    return re.sub(r'name = "([^"]+)"\nversion = "([^"]+)"\n', wheel, text)


LOCK = parse_lock(Path("pylock.t.toml"), with_wheels(LOCK_TEXT))
HASH = LOCK.short_hash
GEN = f"1-{HASH}"
# A cu128 lock that also holds flashinfer's cutlass DSL: -cu12 and -cu13 names that are not
# torch's CUDA libraries (nvidia-cutlass-dsl[cu13] requires both).
CUTLASS_LOCK = parse_lock(
    Path("pylock.t.toml"),
    with_wheels(
        LOCK_TEXT.replace(
            "[tool.envlock]",
            '[[packages]]\nname = "nvidia-cutlass-dsl-libs-cu12"\nversion = "4.8.0"\n\n'
            '[[packages]]\nname = "nvidia-cutlass-dsl-libs-cu13"\nversion = "4.8.0"\n\n'
            "[tool.envlock]",
        )
    ),
)
CUTLASS_GEN = Generation(1, f"1-{CUTLASS_LOCK.short_hash}", CUTLASS_LOCK.short_hash, True)
# PyPI's torch 2.14.1: a CUDA 13.0 build whose metadata carries no label.
PYPI_TORCH = TorchBuild("2.14.1", "cu130", "13.0", cuda_requires=("cu13",), reported="2.14.1+cu130")


def expect(**changes: Any) -> Expectation:
    base = Expectation(
        lock=LOCK,
        root=ROOT,
        venv=VENV,
        python_version="3.11",
        scripts={"train.py": SCRIPT_SHA},
    )
    return dataclasses.replace(base, **changes)


def state(**changes: Any) -> State:
    """A target in sync with LOCK: generation 1 active, every file as built."""
    base = State(
        raw={},
        generations=(Generation(1, GEN, HASH, True),),
        current=GEN,
        in_generation=True,
        venv_link=VenvLink("symlink", f"{ROOT}/current"),
        python_version="3.11.7",
        packages=LOCK.versions(),
        torch=TorchBuild("2.11.0+cu128", "cu128", "12.8", cuda_requires=("cu12",)),
        files=FilesReport(checked=100),
        cache=CacheState(f"{ROOT}/cache/torch-x", exists=True, files=1),
        scripts=ScriptsState("/workspace", {"train.py": SCRIPT_SHA}),
        hardware={},
    )
    return dataclasses.replace(base, **changes)


def kinds(drifts: list[Drift]) -> list[str]:
    return [d.kind for d in drifts]


# -- the table itself ---------------------------------------------------------------------


def test_every_kind_is_declared_once_with_a_repair() -> None:
    names = [k.name for k in KINDS]
    assert len(names) == len(set(names))
    assert all(isinstance(k.repair, Repair) for k in KINDS)
    assert [n for n in names if not KIND[n].blocks_run] == ["cache-dir"]
    with pytest.raises(ValueError, match="undeclared drift kind"):
        Drift("no-such-kind", "x", "y", "z")


def test_in_sync_has_no_drift_and_an_empty_plan_says_why() -> None:
    assert compute_drift(expect(), state()) == []
    plan = make_plan(expect(), state(), [])
    assert plan.empty and plan.reason == f"generation 1 matches lock {HASH}"


# -- each kind from the smallest state that shows it ----------------------------------------

CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, str]] = [
    # kind, expectation changes, state changes, subject, actual
    ("stale-lock", {"stale": ("the profile changed",)}, {}, "lock", "the profile changed"),
    ("uv", {}, {"uv": UvState(present=False, ok=False)}, f"{ROOT}/bin/uv", "missing"),
    ("uv", {}, {"uv": UvState(True, False, "0.12.0")}, f"{ROOT}/bin/uv", "0.12.0"),
    ("no-environment", {}, {"current": None, "generations": ()}, ROOT, "nothing applied yet"),
    (
        "no-environment",
        {},
        {"generations": (Generation(1, GEN, HASH, False),)},
        ROOT,
        f"{GEN} is incomplete",
    ),
    ("interpreter", {}, {"in_generation": False}, f"{ROOT}/current/bin/python", "does not start"),
    ("root-owner", {}, {"trust": Trust(root=OTHERS)}, ROOT, OTHERS),
    ("cache-owner", {}, {"trust": Trust(cache_dir=OTHERS)}, "compile-cache dir", OTHERS),
    (
        "generation-lock",
        {},
        {
            "generations": (Generation(1, "1-000000000000", "000000000000", True),),
            "current": "1-000000000000",
        },
        "1-000000000000",
        "lock 000000000000",
    ),
    ("python-version", {}, {"python_version": "3.12.1"}, "python", "3.12.1"),
    # GPU readiness; every rule's cases are in tests/cli/test_gpu.py. This machine-less
    # state has no NVIDIA driver, which matters only once GPUs are declared.
    ("gpu-driver", {"gpu_count": 1}, {}, "NVIDIA driver", "none"),
    (
        "gpu-library",
        {},
        {"gpu": GpuFacts("580.159.04", (GpuLibrary("libcuda", "/lib/libcuda.so.570.1", "570.1"),))},
        "/lib/libcuda.so.570.1",
        "570.1",
    ),
    ("gpu-device", {"devices": ("/dev/nvidia0",)}, {}, "/dev/nvidia0", "missing"),
    ("gpu-count", {"gpu_count": 1}, {}, "GPUs", "0"),
    (
        "torch-build",
        {},
        {"packages": {**LOCK.versions(), "torch": "2.11.0+cu130"}},
        "torch",
        "2.11.0+cu130",
    ),
    (
        "cuda-libraries",
        {},
        {
            "packages": {**LOCK.versions(), "nvidia-nccl-cu13": "2.28"},
            "torch": TorchBuild("2.11.0+cu128", "cu128", cuda_requires=("cu13",)),
        },
        "nvidia-* libraries",
        "nvidia-*-cu13",
    ),
    (
        "torch-build",
        {},
        {"packages": {**LOCK.versions(), "torch": "2.14.1"}, "torch": PYPI_TORCH},
        "torch",
        "2.14.1 (PyPI build, CUDA 13.0)",
    ),
    (
        "cuda-libraries",
        {"lock": CUTLASS_LOCK},
        {
            "generations": (CUTLASS_GEN,),
            "current": CUTLASS_GEN.name,
            "packages": {**CUTLASS_LOCK.versions(), "torch": "2.14.1", "nvidia-cublas": "13.1"},
            "torch": PYPI_TORCH,
        },
        "nvidia-* libraries",
        "nvidia-*-cu13",
    ),
    (
        "package-version",
        {},
        {"packages": {**LOCK.versions(), "numpy": "1.26.4"}},
        "numpy",
        "1.26.4",
    ),
    (
        "package-missing",
        {},
        {"packages": {k: v for k, v in LOCK.versions().items() if k != "numpy"}},
        "numpy",
        "not installed",
    ),
    ("package-extra", {}, {"packages": {**LOCK.versions(), "sglang": "0.5.2"}}, "sglang", "0.5.2"),
    (
        "pth-injection",
        {},
        {"files": FilesReport(added=(FileChange("lib/site-packages/evil.pth", pth=True),))},
        "lib/site-packages/evil.pth",
        "added",
    ),
    (
        "file-modified",
        {},
        {"files": FilesReport(modified=(FileChange("lib/numpy/x.py", "numpy", 2, "hash"),))},
        "lib/numpy/x.py",
        "modified",
    ),
    (
        "file-missing",
        {},
        {"files": FilesReport(missing=(FileChange("lib/numpy/y.py", "numpy"),))},
        "lib/numpy/y.py",
        "deleted",
    ),
    (
        "file-added",
        {},
        {"files": FilesReport(added=(FileChange("lib/site-packages/stray.py"),))},
        "lib/site-packages/stray.py",
        "added",
    ),
    (
        "script-modified",
        {},
        {"scripts": ScriptsState("/workspace", {"train.py": "b" * 64})},
        "/workspace/train.py",
        "b" * 12,
    ),
    (
        "script-missing",
        {},
        {"scripts": ScriptsState("/workspace", {"train.py": None})},
        "/workspace/train.py",
        "missing",
    ),
    ("venv-link", {}, {"venv_link": VenvLink("absent")}, VENV, "missing"),
    ("venv-link", {}, {"venv_link": VenvLink("symlink", "/elsewhere")}, VENV, "-> /elsewhere"),
    (
        "cache-dir",
        {},
        {"cache": CacheState(f"{ROOT}/cache/torch-x", exists=False)},
        f"{ROOT}/cache/torch-x",
        "missing",
    ),
]


@pytest.mark.parametrize(
    ("kind", "expect_changes", "state_changes", "subject", "actual"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_each_kind_is_found(
    kind: str,
    expect_changes: dict[str, Any],
    state_changes: dict[str, Any],
    subject: str,
    actual: str,
) -> None:
    drifts = compute_drift(expect(**expect_changes), state(**state_changes))
    found = [d for d in drifts if d.kind == kind]
    assert found, kinds(drifts)
    assert (found[0].subject, found[0].actual) == (subject, actual)


def test_every_declared_kind_has_a_case() -> None:
    # Container kinds come from the provisioner, not from compute_drift.
    covered = {c[0] for c in CASES} | {"container", "container-config", "container-restart"}
    assert covered == set(KIND)


def test_drift_is_reported_in_declared_order_even_without_an_environment() -> None:
    broken = state(
        current=None,
        generations=(),
        venv_link=VenvLink("absent"),
        scripts=ScriptsState("/workspace", {"train.py": None}),
        uv=UvState(False, False),
    )
    drifts = compute_drift(expect(stale=("changed",)), broken)
    assert kinds(drifts) == ["uv", "no-environment", "stale-lock", "script-missing", "venv-link"]
    assert [ORDER[k] for k in kinds(drifts)] == sorted(ORDER[k] for k in kinds(drifts))


def test_an_interpreter_that_does_not_start_hides_package_drift() -> None:
    drifts = compute_drift(expect(), state(in_generation=False, packages={}))
    assert kinds(drifts) == ["interpreter"]


def test_files_of_a_package_already_reported_are_folded_into_it() -> None:
    files = FilesReport(modified=(FileChange("lib/numpy/x.py", "numpy"),))
    drifts = compute_drift(
        expect(), state(files=files, packages={**LOCK.versions(), "numpy": "1.0"})
    )
    assert kinds(drifts) == ["package-version"]
    assert drifts[0].detail == "downgraded"


def test_a_build_swap_names_both_labels_and_the_cuda_torch_reports() -> None:
    swapped = state(
        packages={**LOCK.versions(), "torch": "2.11.0+cu130"},
        torch=TorchBuild("2.11.0+cu130", "cu130", "13.0", cuda_requires=("cu13",)),
    )
    (drift,) = [d for d in compute_drift(expect(), swapped) if d.kind == "torch-build"]
    assert "from cu128 to cu130" in drift.detail and "CUDA 13.0" in drift.detail


def test_a_pypi_build_is_named_by_the_label_its_version_py_reports() -> None:
    # PyPI's 2.14.1 says "2.14.1" in its metadata and "2.14.1+cu130" in version.py.
    polluted = state(packages={**LOCK.versions(), "torch": "2.14.1"}, torch=PYPI_TORCH)
    (drift,) = [d for d in compute_drift(expect(), polluted) if d.kind == "torch-build"]
    assert (drift.expected, drift.actual) == ("2.11.0+cu128", "2.14.1 (PyPI build, CUDA 13.0)")
    assert drift.detail == "torch changed from 2.11.0+cu128 to 2.14.1 (PyPI build, CUDA 13.0)"
    # The same version from PyPI over a cu128 lock: a label swap, named from version.py.
    pypi_2110 = TorchBuild("2.11.0", "cu130", "13.0", cuda_requires=("cu13",))
    same = state(packages={**LOCK.versions(), "torch": "2.11.0"}, torch=pypi_2110)
    (swap,) = [d for d in compute_drift(expect(), same) if d.kind == "torch-build"]
    assert "from cu128 to cu130" in swap.detail and "no label" not in swap.detail
    assert swap.actual == "2.11.0 (PyPI build, CUDA 13.0)"


def test_cuda_libraries_fold_the_new_toolkit_but_not_the_cutlass_dsl() -> None:
    new = {
        "nvidia-cublas": "13.1.0.3",
        "nvidia-cufft": "12.0.0.61",  # CUDA 13.0's cuFFT: its version names no major
        "cuda-toolkit": "13.0.2",
        "nvidia-cudnn-cu13": "9.19.0.56",
        "nvidia-cutlass-dsl-libs-cu13": "4.8.0",
        "sglang": "0.5.23",
    }
    polluted = state(packages={**LOCK.versions(), **new, "torch": "2.14.1"}, torch=PYPI_TORCH)
    drifts = compute_drift(expect(), polluted)
    (cuda,) = [d for d in drifts if d.kind == "cuda-libraries"]
    assert cuda.dist.split(",") == [
        "cuda-toolkit",
        "nvidia-cublas",
        "nvidia-cudnn-cu13",
        "nvidia-cufft",
    ]
    extras = {d.subject for d in drifts if d.kind == "package-extra"}
    assert extras == {"nvidia-cutlass-dsl-libs-cu13", "sglang"}


def test_cache_dir_drift_does_not_block_a_run_and_the_rest_does() -> None:
    drifts = compute_drift(
        expect(),
        state(
            cache=CacheState("/c", exists=False),
            venv_link=VenvLink("absent"),
        ),
    )
    assert kinds(drifts) == ["venv-link", "cache-dir"]
    assert kinds(blocking(drifts)) == ["venv-link"]


# -- plans: what each kind asks of apply ----------------------------------------------------

PLAN_CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    ("uv", {"uv": UvState(False, False)}, ["install-uv"]),
    ("no-environment", {"current": None, "generations": ()}, ["build", "cache-dir", "switch"]),
    (
        "no-environment, scripts never deployed",
        {"current": None, "generations": (), "scripts": None},
        ["build", "cache-dir", "switch", "scripts"],
    ),
    ("torch-build", {"packages": {**LOCK.versions(), "torch": "2.11.0+cu130"}}, ["repair"]),
    ("package-extra", {"packages": {**LOCK.versions(), "x": "1"}}, ["repair"]),
    (
        "file-modified",
        {"files": FilesReport(modified=(FileChange("a.py", "numpy", 3),))},
        ["repair"],
    ),
    (
        "file-missing outside any package",
        {"files": FilesReport(missing=(FileChange("bin/activate"),))},
        ["build", "cache-dir", "switch"],
    ),
    (
        "script-modified",
        {"scripts": ScriptsState("/workspace", {"train.py": "b" * 64})},
        ["scripts"],
    ),
    ("venv-link", {"venv_link": VenvLink("absent")}, ["link-venv"]),
    ("cache-dir", {"cache": CacheState("/c", exists=False)}, ["cache-dir"]),
]


@pytest.mark.parametrize(
    ("what", "state_changes", "actions"), PLAN_CASES, ids=[c[0] for c in PLAN_CASES]
)
def test_each_repair_is_planned(
    what: str, state_changes: dict[str, Any], actions: list[str]
) -> None:
    observed = state(**state_changes)
    plan = make_plan(expect(), observed, compute_drift(expect(), observed))
    assert [a.kind for a in plan.actions] == actions


def test_a_repair_reinstalls_changed_packages_and_cleans_shared_cache_entries() -> None:
    files = FilesReport(
        modified=(FileChange("a.py", "numpy", 3), FileChange("b.py", "torch", 1)),
        missing=(FileChange("c.py", "torch"),),
        added=(FileChange("stray.py"), FileChange("ok.py", "numpy")),
    )
    observed = state(files=files)
    (action,) = make_plan(expect(), observed, compute_drift(expect(), observed)).actions
    assert action.args["reinstall"] == ["numpy", "torch"]
    assert action.args["clean_cache"] == ["numpy"]
    assert action.args["remove"] == ["stray.py"]


def test_an_existing_generation_of_the_lock_is_switched_to_not_rebuilt() -> None:
    other = Generation(2, "2-000000000000", "000000000000", True)
    observed = state(generations=(Generation(1, GEN, HASH, True), other), current=other.name)
    plan = make_plan(expect(), observed, compute_drift(expect(), observed))
    assert [a.kind for a in plan.actions] == ["cache-dir", "switch"]
    assert plan.actions[1].args["name"] == GEN


def test_a_new_generation_is_numbered_after_the_highest() -> None:
    old = Generation(7, "7-000000000000", "000000000000", True)
    observed = state(generations=(old,), current=old.name)
    plan = make_plan(expect(), observed, compute_drift(expect(), observed))
    assert plan.actions[0].kind == "build" and plan.actions[0].args["name"] == f"8-{HASH}"


def test_incomplete_generations_are_cleaned_up_but_never_the_active_one() -> None:
    gens = (Generation(1, GEN, HASH, True), Generation(2, "2-x", "x", False))
    plan = make_plan(expect(), state(generations=gens), [])
    assert [(a.kind, a.args.get("names")) for a in plan.actions] == [("cleanup", ["2-x"])]


@pytest.mark.parametrize("trust", [Trust(root=OTHERS), Trust(cache_dir=OTHERS)])
def test_a_directory_of_another_user_is_refused_before_planning(trust: Trust) -> None:
    # Not repaired, not built into: a person decides whose the directory is.
    observed = state(trust=trust, in_generation=False)
    drifts = compute_drift(expect(), observed)
    assert blocking(drifts)[0].declared.repair is Repair.OWNER
    with pytest.raises(OperationError, match="refusing to apply: /opt/envlock is owned"):
        make_plan(expect(), observed, drifts)


def test_a_stale_lock_is_refused_before_planning() -> None:
    drifts = compute_drift(expect(stale=("the profile changed",)), state())
    with pytest.raises(UsageError, match="the lock is stale"):
        make_plan(expect(), state(), drifts)


def test_a_real_directory_at_the_venv_path_is_refused() -> None:
    observed = state(venv_link=VenvLink("directory"))
    with pytest.raises(UsageError, match="real directory"):
        make_plan(expect(), observed, compute_drift(expect(), observed))


# -- rollback and gc over three and more generations ----------------------------------------


def three_generations(current: str, history: list[tuple[str | None, str]]) -> State:
    gens = tuple(Generation(n, f"{n}-{n:012d}", f"{n:012d}", True) for n in (1, 2, 3))
    return state(
        generations=gens,
        current=current,
        history=tuple(Switch(to, frm, "apply", "") for frm, to in history),
    )


def test_rollback_follows_the_switch_history_not_the_numbers() -> None:
    # 1 → 3 → 2: the generation before 2 is 3, though 1 has the lower number.
    observed = three_generations(
        "2-000000000002",
        [
            (None, "1-000000000001"),
            ("1-000000000001", "3-000000000003"),
            ("3-000000000003", "2-000000000002"),
        ],
    )
    prev = previous_generation(observed)
    assert prev is not None and prev.number == 3
    plan = plan_rollback(observed, None)
    assert [(a.kind, a.args["name"]) for a in plan.actions] == [("switch", "3-000000000003")]


def test_without_history_rollback_takes_the_newest_older_generation() -> None:
    observed = three_generations("3-000000000003", [])
    prev = previous_generation(observed)
    assert prev is not None and prev.number == 2


def test_rollback_to_a_number_and_to_the_active_one() -> None:
    observed = three_generations("3-000000000003", [])
    assert plan_rollback(observed, 1).actions[0].args["name"] == "1-000000000001"
    assert plan_rollback(observed, 3).reason == "generation 3 is already active"
    with pytest.raises(UsageError, match="no complete generation 9"):
        plan_rollback(observed, 9)


def test_with_one_generation_rollback_points_to_resync() -> None:
    with pytest.raises(UsageError, match="no previous generation") as info:
        plan_rollback(state(), None)
    assert "--resync" in str(info.value)


def test_gc_removes_the_oldest_and_keeps_active_and_previous() -> None:
    gens = tuple(Generation(n, f"{n}-{n:012d}", f"{n:012d}", True) for n in range(1, 6))
    observed = state(
        generations=gens,
        current="1-000000000001",
        history=(Switch("1-000000000001", "2-000000000002", "rollback", ""),),
    )
    (action,) = plan_gc(observed, keep=2).actions
    # keep 5 and 4 (newest), 1 (active) and 2 (previous): remove 3 only.
    assert action.args["names"] == ["3-000000000003"]
    assert plan_gc(observed, keep=5).empty


# -- the probe's JSON becomes typed state once ------------------------------------------------


def test_parse_state_types_every_part() -> None:
    raw: dict[str, Any] = {
        "generations": [{"number": 1, "name": GEN, "lock_hash": HASH, "complete": True}],
        "current": GEN,
        "in_generation": True,
        "venv_link": {"kind": "symlink", "target": f"{ROOT}/current"},
        "python": {"version": "3.11.7"},
        "packages": {"numpy": "2.1.0"},
        "torch": {"version": "2.11.0", "local": None, "cuda": "13.0", "cuda_requires": ["cu13"]},
        "files": {"checked": 3, "modified": [{"path": "a", "dist": "numpy", "links": 2}]},
        "cache": {"dir": "/c/x", "exists": True, "files": 4, "bytes": 10, "fingerprint": {}},
        "scripts": {"dest": "/w", "hashes": {"t.py": None}},
        "history": [{"action": "rollback", "from": "2-b", "to": GEN, "time": "T"}],
        "uv": {"present": True, "ok": True, "version": "0.13.0"},
        "hostname": "h",
        "machine": "x86_64",
    }
    parsed = parse_state(raw)
    assert parsed.torch == TorchBuild("2.11.0", None, "13.0", cuda_requires=("cu13",))
    assert parsed.files is not None and parsed.files.modified[0].links == 2
    assert parsed.cache is not None and parsed.cache.bytes == 10
    assert parsed.history[0].to_json() == raw["history"][0]
    assert parsed.host.machine == "x86_64" and parsed.uv == UvState(True, True, "0.13.0")
    assert parsed.scripts == ScriptsState("/w", {"t.py": None})


def test_before_any_apply_rollback_says_to_apply_first() -> None:
    with pytest.raises(UsageError, match="nothing applied yet") as info:
        plan_rollback(state(current=None, generations=()), None)
    assert "envlock apply" in str(info.value) and "--resync" not in str(info.value)


def test_parse_state_reads_every_field_of_a_full_answer() -> None:
    raw: dict[str, Any] = {
        "generations": [
            {"number": 1, "name": GEN, "lock_hash": HASH, "complete": True, "meta": {"m": 1}},
            {"number": 2, "name": "2-x", "lock_hash": "x", "complete": False},
        ],
        "current": GEN,
        "in_generation": 1,
        "venv_link": {"kind": "symlink", "target": "/t"},
        "python": {"version": "3.11.7"},
        "packages": {"numpy": "2.1.0"},
        "torch": {
            "version": "2.11.0",
            "local": "cu130",
            "cuda": "13.0",
            "hip": "6.2",
            "git_version": "abc",
            "cuda_requires": ["cu13"],
            "reported": "2.11.0+cu130",
        },
        "files": {
            "checked": 3,
            "modified": [{"path": "a", "dist": "numpy", "links": 2, "why": "w", "pth": 0}],
            "missing": [{"path": "b", "dist": None}],
            "added": [{"path": "c.pth", "pth": 1}],
        },
        "cache": {
            "dir": "/c/x",
            "exists": 1,
            "files": 4,
            "bytes": 10,
            "last_used": 5.0,
            "fingerprint": {"id": "x"},
            "was_warm": 1,
        },
        "scripts": {"dest": "/w", "hashes": {"t.py": None}},
        "hardware": {
            "driver": "580.1",
            "libraries": {
                "libnvidia-ml": {"path": "/l/ml.so.580.1", "version": "580.1"},
                "libcuda": {"path": "/l/cuda.so"},
            },
            "devices": {"/dev/nvidia0": "char"},
            "boards": ["0000:01:00.0", "0000:02:00.0"],
            "gpu_count": 1,
            "smi_error": "NVML",
        },
        "history": [{"action": "rollback", "from": "2-b", "to": GEN, "time": "T"}],
        "uv": {"present": 1, "ok": 0, "version": "0.12.0"},
        "hostname": "h",
        "machine": "x86_64",
        "libc": "glibc 2.36",
        "container": "lxc",
        "hold": {"generation": GEN, "from": "2-b", "time": "T2"},
        "active_lock": "lock text",
    }
    parsed = parse_state(raw)
    assert parsed == State(
        raw=raw,
        generations=(Generation(1, GEN, HASH, True, {"m": 1}), Generation(2, "2-x", "x", False)),
        current=GEN,
        in_generation=True,
        venv_link=VenvLink("symlink", "/t"),
        python_version="3.11.7",
        packages={"numpy": "2.1.0"},
        torch=TorchBuild("2.11.0", "cu130", "13.0", "6.2", "abc", ("cu13",), "2.11.0+cu130"),
        files=FilesReport(
            checked=3,
            modified=(FileChange("a", "numpy", 2, "w", False),),
            missing=(FileChange("b"),),
            added=(FileChange("c.pth", pth=True),),
        ),
        cache=CacheState("/c/x", True, 4, 10, 5.0, {"id": "x"}, True),
        scripts=ScriptsState("/w", {"t.py": None}),
        hardware=raw["hardware"],
        history=(Switch(GEN, "2-b", "rollback", "T"),),
        uv=UvState(True, False, "0.12.0"),
        host=Host("h", "x86_64", "glibc 2.36", "lxc"),
        gpu=GpuFacts(
            "580.1",
            (
                GpuLibrary("libcuda", "/l/cuda.so", None),
                GpuLibrary("libnvidia-ml", "/l/ml.so.580.1", "580.1"),
            ),
            {"/dev/nvidia0": "char"},
            listed=2,
            usable=1,
            smi_error="NVML",
        ),
        hold=Hold(GEN, "2-b", "T2"),
        active_lock="lock text",
    )
    assert type(parsed.in_generation) is bool and type(parsed.cache.exists) is bool  # type: ignore[union-attr]


def test_parse_state_fills_what_an_answer_leaves_out() -> None:
    """An older agent, or a root with nothing applied: every default, spelled out."""
    parsed = parse_state(
        {
            "venv_link": {},
            "torch": {"version": "2.11.0"},
            "files": {"modified": [{"path": "a"}]},
            "cache": {"dir": "/c"},
            "scripts": {},
            "history": [{}],
            "uv": {},
            "hold": {"from": None},
        }
    )
    assert parsed == State(
        raw=parsed.raw,
        generations=(),
        current=None,
        in_generation=False,
        venv_link=VenvLink("absent", None),
        python_version="",
        packages=None,
        torch=TorchBuild("2.11.0"),
        files=FilesReport(0, (FileChange("a", "", 1, "", False),)),
        cache=CacheState("/c", False, 0, None, None, {}, False),
        scripts=ScriptsState("", {}),
        hardware={},
        history=(Switch("", None, "switch", ""),),
        uv=UvState(False, False, None),
        host=Host(),
        gpu=GpuFacts(),
        hold=Hold("", None, ""),
    )
    empty = parse_state({})
    assert (empty.venv_link, empty.torch, empty.files, empty.cache, empty.scripts) == (None,) * 5
    assert (empty.uv, empty.hold, empty.active_lock, empty.history) == (None, None, None, ())
    assert parse_state({"hold": {}}).hold is None


def test_parse_state_fills_what_a_files_or_gpu_answer_leaves_out() -> None:
    parsed = parse_state(
        {
            "files": {"missing": [{"path": "b"}]},
            "hardware": {"libraries": {"libcuda": {"version": "570.1"}}},
        }
    )
    assert parsed.files == FilesReport(0, (), (FileChange("b"),), ())
    assert parsed.gpu == GpuFacts(libraries=(GpuLibrary("libcuda", "", "570.1"),))
