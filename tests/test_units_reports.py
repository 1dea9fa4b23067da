"""Every drift and every plan in full, as a user reads them in `check`, `plan` and `--json`.

tests/test_core.py checks each drift kind's subject and actual value; these tables pin the
rest of each report (expected value, detail, dist) and each plan's actions with their
arguments, for the same hand-written states. A change of wording shows up here as a diff of
what users see, to be reviewed, not as a silent change.
"""

# ruff: noqa: E501 (the tables hold messages whole, as users read them)
from __future__ import annotations

from typing import Any

import pytest

from envlock.reconcile.drift import compute_drift
from envlock.reconcile.plan import make_plan
from tests.test_core import CASES, PLAN_CASES, expect, state

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
            "expected": "generation of lock 17a4d601ac87",
            "actual": "nothing applied yet",
            "detail": "",
            "dist": "",
        }
    ],
    "no-environment-4": [
        {
            "kind": "no-environment",
            "subject": "/opt/envlock",
            "expected": "generation of lock 17a4d601ac87",
            "actual": "1-17a4d601ac87 is incomplete",
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
    "generation-lock-6": [
        {
            "kind": "generation-lock",
            "subject": "1-000000000000",
            "expected": "lock 17a4d601ac87",
            "actual": "lock 000000000000",
            "detail": "the active generation was built from another lock; apply builds or switches to the locked one",
            "dist": "",
        }
    ],
    "python-version-7": [
        {
            "kind": "python-version",
            "subject": "python",
            "expected": "3.11",
            "actual": "3.12.1",
            "detail": "",
            "dist": "",
        }
    ],
    "gpu-driver-8": [
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
    "gpu-library-9": [
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
    "gpu-device-10": [
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
    "gpu-count-11": [
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
    "torch-build-12": [
        {
            "kind": "torch-build",
            "subject": "torch",
            "expected": "2.11.0+cu128",
            "actual": "2.11.0+cu130",
            "detail": "the same cu128 build from another index replaced the locked wheel (the installed build reports CUDA 12.8)",
            "dist": "torch",
        }
    ],
    "cuda-libraries-13": [
        {
            "kind": "cuda-libraries",
            "subject": "nvidia-* libraries",
            "expected": "nvidia-*-cu12",
            "actual": "nvidia-*-cu13",
            "detail": "the CUDA major version changed: the installed packages need CUDA 13 libraries where the lock has CUDA 12 (1 new: nvidia-nccl-cu13)",
            "dist": "nvidia-nccl-cu13",
        }
    ],
    "torch-build-14": [
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
    "cuda-libraries-15": [
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
    "package-version-16": [
        {
            "kind": "package-version",
            "subject": "numpy",
            "expected": "2.1.0",
            "actual": "1.26.4",
            "detail": "downgraded",
            "dist": "numpy",
        }
    ],
    "package-missing-17": [
        {
            "kind": "package-missing",
            "subject": "numpy",
            "expected": "2.1.0",
            "actual": "not installed",
            "detail": "",
            "dist": "numpy",
        }
    ],
    "package-extra-18": [
        {
            "kind": "package-extra",
            "subject": "sglang",
            "expected": "not in the lock",
            "actual": "0.5.2",
            "detail": "",
            "dist": "sglang",
        }
    ],
    "pth-injection-19": [
        {
            "kind": "pth-injection",
            "subject": "lib/site-packages/evil.pth",
            "expected": "absent",
            "actual": "added",
            "detail": ".pth files run code at every interpreter start",
            "dist": "",
        }
    ],
    "file-modified-20": [
        {
            "kind": "file-modified",
            "subject": "lib/numpy/x.py",
            "expected": "as installed",
            "actual": "modified",
            "detail": "hash; the file is hardlinked (2 links), so uv's cache copy is corrupted too: repair drops it from the cache",
            "dist": "numpy",
        }
    ],
    "file-missing-21": [
        {
            "kind": "file-missing",
            "subject": "lib/numpy/y.py",
            "expected": "present",
            "actual": "deleted",
            "detail": "",
            "dist": "numpy",
        }
    ],
    "file-added-22": [
        {
            "kind": "file-added",
            "subject": "lib/site-packages/stray.py",
            "expected": "absent",
            "actual": "added",
            "detail": "",
            "dist": "",
        }
    ],
    "script-modified-23": [
        {
            "kind": "script-modified",
            "subject": "/workspace/train.py",
            "expected": "aaaaaaaaaaaa",
            "actual": "bbbbbbbbbbbb",
            "detail": "the deployed script differs from its pinned hash",
            "dist": "",
        }
    ],
    "script-missing-24": [
        {
            "kind": "script-missing",
            "subject": "/workspace/train.py",
            "expected": "aaaaaaaaaaaa",
            "actual": "missing",
            "detail": "",
            "dist": "",
        }
    ],
    "venv-link-25": [
        {
            "kind": "venv-link",
            "subject": "/opt/venv",
            "expected": "-> /opt/envlock/current",
            "actual": "missing",
            "detail": "",
            "dist": "",
        }
    ],
    "venv-link-26": [
        {
            "kind": "venv-link",
            "subject": "/opt/venv",
            "expected": "-> /opt/envlock/current",
            "actual": "-> /elsewhere",
            "detail": "",
            "dist": "",
        }
    ],
    "cache-dir-27": [
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
                "description": "build generation 1-17a4d601ac87 from lock 17a4d601ac87 (3 packages)",
                "name": "1-17a4d601ac87",
                "number": 1,
            },
            {
                "kind": "cache-dir",
                "description": "make sure the build's compile-cache dir exists (kept if it does)",
                "generation": "1-17a4d601ac87",
            },
            {
                "kind": "switch",
                "description": "switch current to generation 1-17a4d601ac87",
                "name": "1-17a4d601ac87",
                "why": "apply",
            },
        ],
        "",
    ),
    "no-environment, scripts never deployed": (
        [
            {
                "kind": "build",
                "description": "build generation 1-17a4d601ac87 from lock 17a4d601ac87 (3 packages)",
                "name": "1-17a4d601ac87",
                "number": 1,
            },
            {
                "kind": "cache-dir",
                "description": "make sure the build's compile-cache dir exists (kept if it does)",
                "generation": "1-17a4d601ac87",
            },
            {
                "kind": "switch",
                "description": "switch current to generation 1-17a4d601ac87",
                "name": "1-17a4d601ac87",
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
                "description": "re-sync generation 1-17a4d601ac87 to its lock (torch-build)",
                "name": "1-17a4d601ac87",
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
                "description": "re-sync generation 1-17a4d601ac87 to its lock (package-extra)",
                "name": "1-17a4d601ac87",
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
                "description": "re-sync generation 1-17a4d601ac87 to its lock (file-modified)",
                "name": "1-17a4d601ac87",
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
                "description": "rebuild lock 17a4d601ac87 as generation 2-17a4d601ac87 (files outside any package changed)",
                "name": "2-17a4d601ac87",
                "number": 2,
            },
            {
                "kind": "cache-dir",
                "description": "make sure the build's compile-cache dir exists (kept if it does)",
                "generation": "2-17a4d601ac87",
            },
            {
                "kind": "switch",
                "description": "switch current to generation 2-17a4d601ac87",
                "name": "2-17a4d601ac87",
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
                "generation": "1-17a4d601ac87",
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
