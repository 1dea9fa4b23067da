"""Every drift and every plan in full, as a user reads them in `check`, `plan` and `--json`.

tests/unit/test_core.py checks each drift kind's subject and actual value; these tables pin the
rest of each report (expected value, detail, dist) and each plan's actions with their
arguments, for the same hand-written states. A change of wording shows up here as a diff of
what users see, to be reviewed, not as a silent change.
"""

# ruff: noqa: E501 (the tables hold messages whole, as users read them)
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envlock.errors import UsageError
from envlock.lock.read import Lock, parse_lock
from envlock.reconcile.drift import compute_drift
from envlock.reconcile.generations import plan_gc, plan_rollback, previous_generation
from envlock.reconcile.plan import Action, Plan, make_plan
from envlock.reconcile.state import (
    FileChange,
    FilesReport,
    Generation,
    Hold,
    Switch,
    TorchBuild,
    UvState,
    VenvLink,
)
from tests.unit.test_core import (
    CASES,
    GEN,
    HASH,
    LOCK,
    LOCK_TEXT,
    PLAN_CASES,
    ROOT,
    VENV,
    expect,
    state,
    with_wheels,
)

DRIFT_REPORTS: dict[str, list[dict[str, str]]] = {
    "stale-lock-0": [
        {
            "kind": "stale-lock",
            "subject": "lock",
            "expected": "fresh",
            "actual": "the profile changed",
            "detail": "",
            "dist": "",
        }
    ],
    "uv-1": [
        {
            "kind": "uv",
            "subject": "/opt/envlock/bin/uv",
            "expected": "envlock's uv",
            "actual": "missing",
            "detail": "apply pushes envlock's uv binary to the target (no internet needed)",
            "dist": "",
        }
    ],
    "uv-2": [
        {
            "kind": "uv",
            "subject": "/opt/envlock/bin/uv",
            "expected": "envlock's uv",
            "actual": "0.12.0",
            "detail": "apply pushes envlock's uv binary to the target (no internet needed)",
            "dist": "",
        }
    ],
    "no-environment-3": [
        {
            "kind": "no-environment",
            "subject": "/opt/envlock",
            "expected": "generation of lock 095e806adde5",
            "actual": "nothing applied yet",
            "detail": "",
            "dist": "",
        }
    ],
    "no-environment-4": [
        {
            "kind": "no-environment",
            "subject": "/opt/envlock",
            "expected": "generation of lock 095e806adde5",
            "actual": "1-095e806adde5 is incomplete",
            "detail": "",
            "dist": "",
        }
    ],
    "interpreter-5": [
        {
            "kind": "interpreter",
            "subject": "/opt/envlock/current/bin/python",
            "expected": "runs",
            "actual": "does not start",
            "detail": "the generation's interpreter is broken",
            "dist": "",
        }
    ],
    "root-owner-6": [
        {
            "kind": "root-owner",
            "subject": "/opt/envlock",
            "expected": "yours or root's, writable by no one else",
            "actual": "/opt/envlock is owned by mallory (uid 1001), not by root",
            "detail": "envlock neither runs the interpreter of a root another user may write "
            "nor writes into it",
            "dist": "",
        }
    ],
    "cache-owner-7": [
        {
            "kind": "cache-owner",
            "subject": "compile-cache dir",
            "expected": "yours or root's, writable by no one else",
            "actual": "/opt/envlock is owned by mallory (uid 1001), not by root",
            "detail": "never exported to a run: torch loads pickles and .so files from it",
            "dist": "",
        }
    ],
    "generation-lock-8": [
        {
            "kind": "generation-lock",
            "subject": "1-000000000000",
            "expected": "lock 095e806adde5",
            "actual": "lock 000000000000",
            "detail": "the active generation was built from another lock; apply builds or switches to the locked one",
            "dist": "",
        }
    ],
    "python-version-9": [
        {
            "kind": "python-version",
            "subject": "python",
            "expected": "3.11",
            "actual": "3.12.1",
            "detail": "",
            "dist": "",
        }
    ],
    "gpu-driver-10": [
        {
            "kind": "gpu-driver",
            "subject": "NVIDIA driver",
            "expected": "≥ 525.60.13",
            "actual": "none",
            "detail": "torch 2.11.0+cu128 needs an NVIDIA driver ≥ 525.60.13; no NVIDIA kernel module is loaded: install the driver on the host",
            "dist": "",
        },
        {
            "kind": "gpu-count",
            "subject": "GPUs",
            "expected": "1",
            "actual": "0",
            "detail": "[gpu] count expects 1; no NVIDIA driver is loaded, so no GPU is visible",
            "dist": "",
        },
    ],
    "gpu-library-11": [
        {
            "kind": "gpu-library",
            "subject": "/lib/libcuda.so.570.1",
            "expected": "580.159.04",
            "actual": "570.1",
            "detail": "user-space libcuda 570.1, kernel module 580.159.04: install the user-space driver 580.159.04 in the container (the host's installer with `--no-kernel-module`), or reboot a host whose "
            "driver was upgraded",
            "dist": "",
        }
    ],
    "gpu-device-12": [
        {
            "kind": "gpu-driver",
            "subject": "NVIDIA driver",
            "expected": "≥ 525.60.13",
            "actual": "none",
            "detail": "torch 2.11.0+cu128 needs an NVIDIA driver ≥ 525.60.13; no NVIDIA kernel module is loaded: install the driver on the host",
            "dist": "",
        },
        {
            "kind": "gpu-device",
            "subject": "/dev/nvidia0",
            "expected": "character device",
            "actual": "missing",
            "detail": "[container] devices lists it, but the container has no such node: check that the node has it and restart the container",
            "dist": "",
        },
        {
            "kind": "gpu-count",
            "subject": "GPUs",
            "expected": "1",
            "actual": "0",
            "detail": "the /dev/nvidiaN in [container] devices expects 1; no NVIDIA driver is loaded, so no GPU is visible",
            "dist": "",
        },
    ],
    "gpu-count-13": [
        {
            "kind": "gpu-driver",
            "subject": "NVIDIA driver",
            "expected": "≥ 525.60.13",
            "actual": "none",
            "detail": "torch 2.11.0+cu128 needs an NVIDIA driver ≥ 525.60.13; no NVIDIA kernel module is loaded: install the driver on the host",
            "dist": "",
        },
        {
            "kind": "gpu-count",
            "subject": "GPUs",
            "expected": "1",
            "actual": "0",
            "detail": "[gpu] count expects 1; no NVIDIA driver is loaded, so no GPU is visible",
            "dist": "",
        },
    ],
    "torch-build-14": [
        {
            "kind": "torch-build",
            "subject": "torch",
            "expected": "2.11.0+cu128",
            "actual": "2.11.0+cu130",
            "detail": "the same cu128 build from another index replaced the locked wheel (the installed build reports CUDA 12.8)",
            "dist": "torch",
        }
    ],
    "cuda-libraries-15": [
        {
            "kind": "cuda-libraries",
            "subject": "nvidia-* libraries",
            "expected": "nvidia-*-cu12",
            "actual": "nvidia-*-cu13",
            "detail": "the CUDA major version changed: the installed packages need CUDA 13 libraries where the lock has CUDA 12 (1 new: nvidia-nccl-cu13)",
            "dist": "nvidia-nccl-cu13",
        }
    ],
    "torch-build-16": [
        {
            "kind": "torch-build",
            "subject": "torch",
            "expected": "2.11.0+cu128",
            "actual": "2.14.1 (PyPI build, CUDA 13.0)",
            "detail": "torch changed from 2.11.0+cu128 to 2.14.1 (PyPI build, CUDA 13.0)",
            "dist": "torch",
        },
        {
            "kind": "cuda-libraries",
            "subject": "nvidia-* libraries",
            "expected": "nvidia-*-cu12",
            "actual": "nvidia-*-cu13",
            "detail": "the CUDA major version changed: the installed packages need CUDA 13 libraries where the lock has CUDA 12",
            "dist": "",
        },
    ],
    "cuda-libraries-17": [
        {
            "kind": "torch-build",
            "subject": "torch",
            "expected": "2.11.0+cu128",
            "actual": "2.14.1 (PyPI build, CUDA 13.0)",
            "detail": "torch changed from 2.11.0+cu128 to 2.14.1 (PyPI build, CUDA 13.0)",
            "dist": "torch",
        },
        {
            "kind": "cuda-libraries",
            "subject": "nvidia-* libraries",
            "expected": "nvidia-*-cu12",
            "actual": "nvidia-*-cu13",
            "detail": "the CUDA major version changed: the installed packages need CUDA 13 libraries where the lock has CUDA 12 (1 new: nvidia-cublas)",
            "dist": "nvidia-cublas",
        },
    ],
    "package-version-18": [
        {
            "kind": "package-version",
            "subject": "numpy",
            "expected": "2.1.0",
            "actual": "1.26.4",
            "detail": "downgraded",
            "dist": "numpy",
        }
    ],
    "package-missing-19": [
        {
            "kind": "package-missing",
            "subject": "numpy",
            "expected": "2.1.0",
            "actual": "not installed",
            "detail": "",
            "dist": "numpy",
        }
    ],
    "package-extra-20": [
        {
            "kind": "package-extra",
            "subject": "sglang",
            "expected": "not in the lock",
            "actual": "0.5.2",
            "detail": "",
            "dist": "sglang",
        }
    ],
    "pth-injection-21": [
        {
            "kind": "pth-injection",
            "subject": "lib/site-packages/evil.pth",
            "expected": "absent",
            "actual": "added",
            "detail": ".pth files run code at every interpreter start",
            "dist": "",
        }
    ],
    "file-modified-22": [
        {
            "kind": "file-modified",
            "subject": "lib/numpy/x.py",
            "expected": "as installed",
            "actual": "modified",
            "detail": "hash; the file is hardlinked (2 links), so uv's cache copy is corrupted too: repair drops it from the cache",
            "dist": "numpy",
        }
    ],
    "file-missing-23": [
        {
            "kind": "file-missing",
            "subject": "lib/numpy/y.py",
            "expected": "present",
            "actual": "deleted",
            "detail": "",
            "dist": "numpy",
        }
    ],
    "file-added-24": [
        {
            "kind": "file-added",
            "subject": "lib/site-packages/stray.py",
            "expected": "absent",
            "actual": "added",
            "detail": "",
            "dist": "",
        }
    ],
    "script-modified-25": [
        {
            "kind": "script-modified",
            "subject": "/workspace/train.py",
            "expected": "aaaaaaaaaaaa",
            "actual": "bbbbbbbbbbbb",
            "detail": "the deployed script differs from its pinned hash",
            "dist": "",
        }
    ],
    "script-missing-26": [
        {
            "kind": "script-missing",
            "subject": "/workspace/train.py",
            "expected": "aaaaaaaaaaaa",
            "actual": "missing",
            "detail": "",
            "dist": "",
        }
    ],
    "venv-link-27": [
        {
            "kind": "venv-link",
            "subject": "/opt/venv",
            "expected": "-> /opt/envlock/current",
            "actual": "missing",
            "detail": "",
            "dist": "",
        }
    ],
    "venv-link-28": [
        {
            "kind": "venv-link",
            "subject": "/opt/venv",
            "expected": "-> /opt/envlock/current",
            "actual": "-> /elsewhere",
            "detail": "",
            "dist": "",
        }
    ],
    "cache-dir-29": [
        {
            "kind": "cache-dir",
            "subject": "/opt/envlock/cache/torch-x",
            "expected": "exists",
            "actual": "missing",
            "detail": "the compile-cache dir of this build does not exist yet",
            "dist": "",
        }
    ],
}
PLAN_REPORTS: dict[str, tuple[list[dict[str, object]], str]] = {
    "uv": (
        [
            {
                "kind": "install-uv",
                "description": "install uv 0.13.9 into /opt/envlock/bin (pushed from here, hash-verified)",
                "path": "/opt/envlock/bin/uv",
                "version": "0.13.9",
            }
        ],
        "",
    ),
    "no-environment": (
        [
            {
                "kind": "build",
                "description": "build generation 1-095e806adde5 from lock 095e806adde5 (3 packages)",
                "name": "1-095e806adde5",
                "number": 1,
            },
            {
                "kind": "cache-dir",
                "description": "make sure the build's compile-cache dir exists (kept if it does)",
                "generation": "1-095e806adde5",
            },
            {
                "kind": "switch",
                "description": "switch current to generation 1-095e806adde5",
                "name": "1-095e806adde5",
                "why": "apply",
            },
        ],
        "",
    ),
    "no-environment, scripts never deployed": (
        [
            {
                "kind": "build",
                "description": "build generation 1-095e806adde5 from lock 095e806adde5 (3 packages)",
                "name": "1-095e806adde5",
                "number": 1,
            },
            {
                "kind": "cache-dir",
                "description": "make sure the build's compile-cache dir exists (kept if it does)",
                "generation": "1-095e806adde5",
            },
            {
                "kind": "switch",
                "description": "switch current to generation 1-095e806adde5",
                "name": "1-095e806adde5",
                "why": "apply",
            },
            {"kind": "scripts", "description": "deploy 1 pinned script(s)", "files": ["train.py"]},
        ],
        "",
    ),
    "torch-build": (
        [
            {
                "kind": "repair",
                "description": "re-sync generation 1-095e806adde5 to its lock (torch-build)",
                "name": "1-095e806adde5",
                "reinstall": [],
                "clean_cache": [],
                "remove": [],
            }
        ],
        "",
    ),
    "package-extra": (
        [
            {
                "kind": "repair",
                "description": "re-sync generation 1-095e806adde5 to its lock (package-extra)",
                "name": "1-095e806adde5",
                "reinstall": [],
                "clean_cache": [],
                "remove": [],
            }
        ],
        "",
    ),
    "file-modified": (
        [
            {
                "kind": "repair",
                "description": "re-sync generation 1-095e806adde5 to its lock (file-modified)",
                "name": "1-095e806adde5",
                "reinstall": ["numpy"],
                "clean_cache": ["numpy"],
                "remove": [],
            }
        ],
        "",
    ),
    "file-missing outside any package": (
        [
            {
                "kind": "build",
                "description": "rebuild lock 095e806adde5 as generation 2-095e806adde5 (files outside any package changed)",
                "name": "2-095e806adde5",
                "number": 2,
            },
            {
                "kind": "cache-dir",
                "description": "make sure the build's compile-cache dir exists (kept if it does)",
                "generation": "2-095e806adde5",
            },
            {
                "kind": "switch",
                "description": "switch current to generation 2-095e806adde5",
                "name": "2-095e806adde5",
                "why": "apply",
            },
        ],
        "",
    ),
    "script-modified": (
        [{"kind": "scripts", "description": "deploy 1 pinned script(s)", "files": ["train.py"]}],
        "",
    ),
    "venv-link": (
        [{"kind": "link-venv", "description": "point /opt/venv at /opt/envlock/current"}],
        "",
    ),
    "cache-dir": (
        [
            {
                "kind": "cache-dir",
                "description": "create the compile-cache dir of the build",
                "generation": "1-095e806adde5",
            }
        ],
        "",
    ),
}


@pytest.mark.parametrize(
    ("case", "expect_changes", "state_changes"),
    [(f"{c[0]}-{i}", c[1], c[2]) for i, c in enumerate(CASES)],
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_each_drift_report_in_full(
    case: str, expect_changes: dict[str, Any], state_changes: dict[str, Any]
) -> None:
    drifts = compute_drift(expect(**expect_changes), state(**state_changes))
    assert [d.to_json() for d in drifts] == DRIFT_REPORTS[case]


@pytest.mark.parametrize(
    ("what", "state_changes"), [(c[0], c[1]) for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES]
)
def test_each_plan_in_full(what: str, state_changes: dict[str, Any]) -> None:
    observed = state(**state_changes)
    plan = make_plan(expect(), observed, compute_drift(expect(), observed))
    assert ([a.to_json() for a in plan.actions], plan.reason) == PLAN_REPORTS[what]


def test_the_tables_cover_every_case() -> None:
    assert len(DRIFT_REPORTS) == len(CASES) and len(PLAN_REPORTS) == len(PLAN_CASES)


# -- more reports in full: the branches the kind table does not take --------------------------


def drift(
    kind: str, subject: str, expected: str, actual: str, detail: str = "", dist: str = ""
) -> dict[str, str]:
    return {
        "kind": kind,
        "subject": subject,
        "expected": expected,
        "actual": actual,
        "detail": detail,
        "dist": dist,
    }


def on_lock(text: str) -> tuple[Lock, dict[str, Any]]:
    """A lock from LOCK_TEXT changed, and the state changes of a target in sync with it."""
    lock = parse_lock(Path("pylock.t.toml"), with_wheels(text))
    gen = Generation(1, f"1-{lock.short_hash}", lock.short_hash, True)
    return lock, {"generations": (gen,), "current": gen.name, "packages": lock.versions()}


UNLABELLED_LOCK, ON_UNLABELLED = on_lock(LOCK_TEXT.replace('"2.11.0+cu128"', '"2.11.0"'))
NO_CUDA_LOCK, ON_NO_CUDA = on_lock(LOCK_TEXT.replace('"nvidia-cudnn-cu12"', '"tqdm"'))
TWO_MAJORS_LOCK, ON_TWO_MAJORS = on_lock(
    LOCK_TEXT.replace(
        "[tool.envlock]",
        '[[packages]]\nname = "nvidia-nccl-cu11"\nversion = "2.1"\n\n[tool.envlock]',
    )
)
VERSIONS = LOCK.versions()
NEEDS_CU13 = TorchBuild("2.11.0+cu128", "cu128", cuda_requires=("cu13",))
SAME_BUILD = "torch's build changed from {} to {}: same version, different CUDA build; something installed over it"
CU13_DETAIL = "the CUDA major version changed: the installed packages need CUDA 13 libraries where the lock has CUDA 12"
LINK = ("venv-link", VENV, f"-> {ROOT}/current")

MORE_REPORTS: list[tuple[str, dict[str, Any], dict[str, Any], list[dict[str, str]]]] = [
    (
        "uv-unknown",
        {},
        {"uv": UvState(present=True, ok=False)},
        [
            drift(
                "uv",
                f"{ROOT}/bin/uv",
                "envlock's uv",
                "?",
                "apply pushes envlock's uv binary to the target (no internet needed)",
            )
        ],
    ),
    (
        "torch-version",
        {},
        {
            "packages": {**VERSIONS, "torch": "2.12.0+cu128"},
            "torch": TorchBuild("2.12.0+cu128", "cu128", "12.8"),
        },
        [
            drift(
                "torch-build",
                "torch",
                "2.11.0+cu128",
                "2.12.0+cu128",
                "torch changed from 2.11.0+cu128 to 2.12.0+cu128 (the installed build reports CUDA 12.8)",
                "torch",
            )
        ],
    ),
    (
        "torch-same-build-other-index",
        {},
        {
            "packages": {**VERSIONS, "torch": "2.11.0"},
            "torch": TorchBuild("2.11.0", "cu128", "12.8"),
        },
        [
            drift(
                "torch-build",
                "torch",
                "2.11.0+cu128",
                "2.11.0 (PyPI build, CUDA 12.8)",
                "the same cu128 build from another index replaced the locked wheel",
                "torch",
            )
        ],
    ),
    (
        "torch-no-label",
        {},
        {"packages": {**VERSIONS, "torch": "2.11.0"}, "torch": None},
        [
            drift(
                "torch-build",
                "torch",
                "2.11.0+cu128",
                "2.11.0",
                SAME_BUILD.format("cu128", "no label"),
                "torch",
            )
        ],
    ),
    (
        "torch-label-from-the-version-alone",
        {},
        {"packages": {**VERSIONS, "torch": "2.11.0+cu130"}, "torch": None},
        [
            drift(
                "torch-build",
                "torch",
                "2.11.0+cu128",
                "2.11.0+cu130",
                SAME_BUILD.format("cu128", "cu130"),
                "torch",
            )
        ],
    ),
    (
        "torch-pypi-without-cuda",
        {},
        {
            "packages": {**VERSIONS, "torch": "2.11.0"},
            "torch": TorchBuild("2.11.0", "rocm6.4", None, reported="2.11.0+rocm6.4"),
        },
        [
            drift(
                "torch-build",
                "torch",
                "2.11.0+cu128",
                "2.11.0 (PyPI build, +rocm6.4)",
                SAME_BUILD.format("cu128", "rocm6.4"),
                "torch",
            )
        ],
    ),
    (
        "torch-metadata-disagrees",  # a labelled build whose metadata version is not the installed one
        {},
        {
            "packages": {**VERSIONS, "torch": "2.11.0+cu130"},
            "torch": TorchBuild("2.11.0", "cu130", "13.0"),
        },
        [
            drift(
                "torch-build",
                "torch",
                "2.11.0+cu128",
                "2.11.0+cu130",
                SAME_BUILD.format("cu128", "cu130"),
                "torch",
            )
        ],
    ),
    (
        "torch-over-an-unlabelled-lock",
        {"lock": UNLABELLED_LOCK},
        {**ON_UNLABELLED, "packages": {**UNLABELLED_LOCK.versions(), "torch": "2.11.0+cu128"}},
        [
            drift(
                "torch-build",
                "torch",
                "2.11.0",
                "2.11.0+cu128",
                SAME_BUILD.format("the unlabelled (PyPI) build", "cu128")
                + " (the installed build reports CUDA 12.8)",
                "torch",
            )
        ],
    ),
    (
        "package-downgraded",
        {},
        {"packages": {**VERSIONS, "numpy": "1.0"}},
        [drift("package-version", "numpy", "2.1.0", "1.0", "downgraded", "numpy")],
    ),
    (
        "package-same-version-other-spelling",
        {},
        {"packages": {**VERSIONS, "numpy": "2.1"}},
        [drift("package-version", "numpy", "2.1.0", "2.1", "upgraded", "numpy")],
    ),
    (
        "package-invalid-version",
        {},
        {"packages": {**VERSIONS, "numpy": "not-a-version"}},
        [drift("package-version", "numpy", "2.1.0", "not-a-version", "changed", "numpy")],
    ),
    (
        "file-one-link",
        {},
        {"files": FilesReport(modified=(FileChange("lib/numpy/x.py", "numpy", 1, "hash"),))},
        [drift("file-modified", "lib/numpy/x.py", "as installed", "modified", "hash", "numpy")],
    ),
    (
        "pth-of-a-package",
        {},
        {"files": FilesReport(added=(FileChange("lib/site-packages/a.pth", "numpy", pth=True),))},
        [
            drift(
                "pth-injection",
                "lib/site-packages/a.pth",
                "absent",
                "added",
                ".pth files run code at every interpreter start",
                "numpy",
            )
        ],
    ),
    (
        "no-scripts-state",
        {},
        {"scripts": None},
        [drift("script-missing", "train.py", "a" * 12, "missing")],
    ),
    (
        "link-directory",
        {},
        {"venv_link": VenvLink("directory")},
        [drift(*LINK, "a real directory")],
    ),
    ("link-file", {}, {"venv_link": VenvLink("file")}, [drift(*LINK, "a file")]),
    ("link-unprobed", {}, {"venv_link": None}, [drift(*LINK, "missing")]),
    ("link-other", {}, {"venv_link": VenvLink("socket")}, [drift(*LINK, "?")]),
    (
        "cuda-two-new-and-their-files-folded",
        {},
        {
            "packages": {**VERSIONS, "nvidia-nccl-cu13": "2.28", "nvidia-cublas-cu13": "13.1"},
            "torch": NEEDS_CU13,
            "files": FilesReport(modified=(FileChange("lib/nccl.so", "nvidia-nccl-cu13"),)),
        },
        [
            drift(
                "cuda-libraries",
                "nvidia-* libraries",
                "nvidia-*-cu12",
                "nvidia-*-cu13",
                CU13_DETAIL + " (2 new: nvidia-cublas-cu13, nvidia-nccl-cu13)",
                "nvidia-cublas-cu13,nvidia-nccl-cu13",
            )
        ],
    ),
    (
        "cuda-from-new-libraries",
        {},
        {"packages": {**VERSIONS, "nvidia-nccl-cu13": "2.28"}, "torch": None},
        [
            drift(
                "cuda-libraries",
                "nvidia-* libraries",
                "nvidia-*-cu12",
                "nvidia-*-cu13",
                CU13_DETAIL + " (1 new: nvidia-nccl-cu13)",
                "nvidia-nccl-cu13",
            )
        ],
    ),
    (
        "cuda-on-a-lock-without-cuda",
        {"lock": NO_CUDA_LOCK},
        {
            **ON_NO_CUDA,
            "packages": {**NO_CUDA_LOCK.versions(), "nvidia-nccl-cu13": "2.28"},
            "torch": NEEDS_CU13,
        },
        [
            drift(
                "package-extra",
                "nvidia-nccl-cu13",
                "not in the lock",
                "2.28",
                "",
                "nvidia-nccl-cu13",
            )
        ],
    ),
    (
        "cuda-several-majors",
        {"lock": TWO_MAJORS_LOCK},
        {
            **ON_TWO_MAJORS,
            "packages": {**TWO_MAJORS_LOCK.versions(), "nvidia-nccl-cu13": "2.28"},
            "torch": TorchBuild("2.11.0+cu128", "cu128", cuda_requires=("cu12", "cu13")),
        },
        [
            drift(
                "cuda-libraries",
                "nvidia-* libraries",
                "nvidia-*-cu11/cu12",
                "nvidia-*-cu12/cu13",
                "the CUDA major version changed: the installed packages need CUDA 12/13 libraries "
                "where the lock has CUDA 11/12 (1 new: nvidia-nccl-cu13)",
                "nvidia-nccl-cu13",
            )
        ],
    ),
]


@pytest.mark.parametrize(
    ("expect_changes", "state_changes", "report"),
    [c[1:] for c in MORE_REPORTS],
    ids=[c[0] for c in MORE_REPORTS],
)
def test_more_drift_reports_in_full(
    expect_changes: dict[str, Any], state_changes: dict[str, Any], report: list[dict[str, str]]
) -> None:
    assert [
        d.to_json() for d in compute_drift(expect(**expect_changes), state(**state_changes))
    ] == report


def plan_of(
    expect_changes: dict[str, Any], state_changes: dict[str, Any]
) -> tuple[list[dict[str, Any]], str]:
    observed = state(**state_changes)
    plan = make_plan(
        expect(**expect_changes), observed, compute_drift(expect(**expect_changes), observed)
    )
    return [a.to_json() for a in plan.actions], plan.reason


NEW = "2-095e806adde5"
CACHE_DIR = {
    "kind": "cache-dir",
    "description": "make sure the build's compile-cache dir exists (kept if it does)",
    "generation": NEW,
}
OTHER = Generation(1, "1-000000000000", "000000000000", True)
MORE_PLANS: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
    (
        "two-stray-generations",
        {
            "generations": (
                Generation(1, GEN, HASH, True),
                Generation(2, "2-x", "x", False),
                Generation(3, "3-y", "y", False),
            )
        },
        [
            {
                "kind": "cleanup",
                "description": "remove 2 incomplete generation(s): 2-x, 3-y",
                "names": ["2-x", "3-y"],
            }
        ],
    ),
    (
        "apply-over-a-rollback-hold",
        {"generations": (OTHER,), "current": OTHER.name, "hold": Hold(OTHER.name, None, "t")},
        [
            {
                "kind": "build",
                "description": f"build generation {NEW} from lock {HASH} (3 packages)",
                "name": NEW,
                "number": 2,
            },
            CACHE_DIR,
            {
                "kind": "switch",
                "description": f"switch current to generation {NEW} (return to the profile's lock: a rollback holds the target)",
                "name": NEW,
                "why": "apply",
            },
        ],
    ),
    (
        "file-outside-packages-modified",
        {"files": FilesReport(modified=(FileChange("bin/activate"),))},
        [
            {
                "kind": "build",
                "description": f"rebuild lock {HASH} as generation {NEW} (files outside any package changed)",
                "name": NEW,
                "number": 2,
            },
            CACHE_DIR,
            {
                "kind": "switch",
                "description": f"switch current to generation {NEW}",
                "name": NEW,
                "why": "apply",
            },
        ],
    ),
    (
        "link-unprobed",
        {"venv_link": None},
        [{"kind": "link-venv", "description": f"point {VENV} at {ROOT}/current"}],
    ),
    (
        "repair-of-every-file-kind",
        {
            "files": FilesReport(
                modified=(
                    FileChange("lib/numpy/a.py", "numpy", 2),
                    FileChange("lib/torch/b.py", "torch", 1),
                ),
                missing=(FileChange("lib/tqdm/b.py", "tqdm"),),
                added=(
                    FileChange("lib/evil.pth", pth=True),
                    FileChange("lib/stray.py"),
                    FileChange("lib/numpy/c.py", "numpy"),
                ),
            )
        },
        [
            {
                "kind": "repair",
                "description": f"re-sync generation {GEN} to its lock (file-added, file-missing, file-modified, pth-injection)",
                "name": GEN,
                "reinstall": ["numpy", "torch", "tqdm"],
                "clean_cache": ["numpy"],
                "remove": ["lib/evil.pth", "lib/stray.py"],
            }
        ],
    ),
]


@pytest.mark.parametrize(
    ("state_changes", "actions"), [c[1:] for c in MORE_PLANS], ids=[c[0] for c in MORE_PLANS]
)
def test_more_plans_in_full(state_changes: dict[str, Any], actions: list[dict[str, Any]]) -> None:
    assert plan_of({}, state_changes) == (actions, "")


VENV_HINT = f"move it away (e.g. `mv {VENV} {VENV}.old`) or set [target] venv to another path"


@pytest.mark.parametrize(
    ("expect_changes", "state_changes", "message", "hint"),
    [
        (
            {"stale": ("the profile changed", "the index changed")},
            {},
            "the lock is stale: the profile changed; the index changed",
            "run `envlock lock` first",
        ),
        (
            {},
            {"venv_link": VenvLink("file")},
            f"{VENV} exists and is a real file; envlock points this path at the active generation with a symlink and never deletes a user's files",
            VENV_HINT,
        ),
        (
            {},
            {"venv_link": VenvLink("directory")},
            f"{VENV} exists and is a real directory; envlock points this path at the active generation with a symlink and never deletes a user's files",
            "`envlock apply --adopt PROFILE` keeps the venv there as generation 0 (moved under "
            f"{ROOT}/generations/ unchanged, so a rollback returns to it), or move it away "
            f"(e.g. `mv {VENV} {VENV}.old`), or set [target] venv to another path",
        ),
    ],
)
def test_plan_refusals_in_full(
    expect_changes: dict[str, Any], state_changes: dict[str, Any], message: str, hint: str
) -> None:
    with pytest.raises(UsageError) as info:
        plan_of(expect_changes, state_changes)
    assert (info.value.message, info.value.hint) == (message, hint)


def gens(*numbers: int, incomplete: tuple[int, ...] = ()) -> tuple[Generation, ...]:
    return tuple(Generation(n, f"{n}-g", "g", n not in incomplete) for n in numbers)


def switch_plan(name: str) -> Plan:
    return Plan(
        (
            Action(
                "switch",
                f"switch current to generation {name} (rollback)",
                {"name": name, "why": "rollback"},
            ),
        )
    )


@pytest.mark.parametrize(
    ("current", "history", "to", "plan"),
    [
        ("3-g", [], None, switch_plan("2-g")),
        ("2-g", [], None, switch_plan("1-g")),  # the newest older one, not the newest
        ("3-g", [("1-g", "2-g")], None, switch_plan("2-g")),  # a switch to another one says nothing
        ("3-g", [(None, "3-g")], None, switch_plan("2-g")),  # nor one from nothing
        ("3-g", [("1-g", "3-g")], None, switch_plan("1-g")),
        ("3-g", [], 1, switch_plan("1-g")),
        ("3-g", [], 3, Plan((), "generation 3 is already active")),
    ],
)
def test_rollback_plans_in_full(
    current: str, history: list[tuple[str | None, str]], to: int | None, plan: Plan
) -> None:
    observed = state(
        generations=gens(1, 2, 3),
        current=current,
        history=tuple(Switch(t, f, "apply", "") for f, t in history),
    )
    assert plan_rollback(observed, to) == plan


def test_previous_generation_without_a_current_one() -> None:
    assert previous_generation(state(generations=gens(1, 2), current=None)) == gens(2)[0]


@pytest.mark.parametrize(
    ("generations", "to", "message", "hint"),
    [
        (
            gens(1, incomplete=(1,)),
            None,
            "nothing applied yet: no generation to roll back to",
            "run `envlock apply` first",
        ),
        (gens(1, 2), 9, "no complete generation 9", "see `envlock generations`"),
        (
            gens(1, 2, incomplete=(1,)),
            None,
            "no previous generation to roll back to",
            "use `envlock rollback --resync` to restore the active generation from its lock",
        ),
    ],
)
def test_rollback_refusals_in_full(
    generations: tuple[Generation, ...], to: int | None, message: str, hint: str
) -> None:
    with pytest.raises(UsageError) as info:
        plan_rollback(
            state(generations=generations, current="2-g" if len(generations) > 1 else "1-g"), to
        )
    assert (info.value.message, info.value.hint) == (message, hint)


def test_gc_plans_in_full() -> None:
    observed = state(generations=gens(1, 2, 3, 4, 5, incomplete=(4,)), current="5-g")
    assert plan_gc(observed, keep=1) == Plan(
        (
            Action(
                "cleanup",
                "remove 3 generation(s): 4-g, 2-g, 1-g",
                {"names": ["4-g", "2-g", "1-g"], "irreplaceable": []},
            ),
        )
    )
    assert plan_gc(observed, keep=4) == Plan(
        (Action("cleanup", "remove 1 generation(s): 4-g", {"names": ["4-g"], "irreplaceable": []}),)
    )
    complete = state(generations=gens(1, 2), current="2-g")
    assert plan_gc(complete, keep=1) == Plan((), "nothing to remove (2 generation(s) kept)")


def test_gc_keeps_what_no_lock_can_rebuild_unless_asked() -> None:
    adopted = Generation(0, "0-a", "a", True, {"adopted_from": "/srv/venv"})
    lockless = Generation(1, "1-g", "g", True, has_lock=False)
    observed = state(generations=(adopted, lockless, *gens(2, 3, 4)), current="4-g")
    kept_0 = (
        "kept 0-a: adopted from /srv/venv, no lock can rebuild it; to remove it anyway, "
        "pass `--include 0` or `--include-adopted`"
    )
    kept_1 = (
        "kept 1-g: its lock file is gone, no lock can rebuild it; to remove it anyway, "
        "pass `--include 1` or `--include-adopted`"
    )
    plan = plan_gc(observed, keep=1)
    assert plan.actions[0].args == {"names": ["2-g"], "irreplaceable": []}
    assert plan.reason == f"{kept_1}\n{kept_0}"
    named = plan_gc(observed, keep=1, named=("1",))
    assert named.actions[0].description == (
        "remove 2 generation(s): 2-g, 1-g (its lock file is gone, no lock can rebuild it)"
    )
    assert named.reason == kept_0
    every = plan_gc(observed, keep=1, include_adopted=True)
    assert every.actions[0].args == {
        "names": ["2-g", "1-g", "0-a"],
        "irreplaceable": ["1-g", "0-a"],
    }
    assert every.reason == ""
    with pytest.raises(UsageError, match="gc --include 7: no such generation"):
        plan_gc(observed, keep=1, named=("7",))
