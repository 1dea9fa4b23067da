"""CUDA as package names show it: `nvidia-*-cuNN` libraries and the major they name.

(The agent, shipped alone and stdlib-only, reads torch's requirements with its own copy.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NVIDIA_RE = re.compile(r"^(nvidia-[a-z0-9-]+?)-cu(\d+)$")


def is_cuda_library(name: str) -> bool:
    """`nvidia-cudnn-cu12`, `nvidia-nccl-cu13`, … (canonical names)."""
    return NVIDIA_RE.match(name) is not None


def cuda_majors(names: Iterable[str]) -> set[str]:
    """CUDA majors named by nvidia-*-cuNN package names."""
    return {m.group(2) for name in names for m in [NVIDIA_RE.match(name)] if m}
