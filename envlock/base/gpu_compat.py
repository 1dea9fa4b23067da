"""The oldest NVIDIA driver each CUDA major runs on: the one table the GPU checks read.

From CUDA 11 on, a build for any minor release of a CUDA major runs on the driver that came
with the major's first release ("minor version compatibility"). NVIDIA's CUDA Compatibility
guide, "Minor Version Compatibility", Table 1
(https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html), gives
the branches: CUDA 13.x >= 580, 12.x >= 525, 11.x >= 450 (450.80.02 by its footnote), and
points to the CUDA Toolkit release notes' table "CUDA Toolkit and Minimum Required Driver
Version for CUDA Minor Version Compatibility" for the exact builds: the drivers the first
toolkit of each major shipped with, as in NVIDIA's installer names
cuda_12.0.0_525.60.13_linux.run and cuda_13.0.0_580.65.06_linux.run (Linux x86_64).
"""

from __future__ import annotations

import re

MIN_DRIVER: dict[int, str] = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580.65.06",
}
# The build label to suggest for a driver that is too old for the locked one (PyTorch's).
SUGGESTED_LABEL: dict[int, str] = {11: "cu118", 12: "cu128", 13: "cu130"}


def driver_version(text: str) -> tuple[int, ...]:
    """`580.65.06` as (580, 65, 6): driver versions compare number by number."""
    return tuple(int(part) for part in re.findall(r"\d+", text))


def min_driver(cuda: str) -> str | None:
    """The oldest driver a build for CUDA `cuda` ("12.8", "13.0") runs on; None if unknown."""
    major = cuda.partition(".")[0]
    return MIN_DRIVER.get(int(major)) if major.isdigit() else None


def newest_major(driver: str) -> int | None:
    """The newest CUDA major a driver runs, by the table (None: older than all of it)."""
    have = driver_version(driver)
    majors = [major for major, need in MIN_DRIVER.items() if have >= driver_version(need)]
    return max(majors, default=None)
