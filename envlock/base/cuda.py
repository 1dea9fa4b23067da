"""CUDA as package names show it: which packages are torch's CUDA libraries, and which major.

torch's CUDA 12 builds require suffixed libraries (`nvidia-cublas-cu12`); its CUDA 13 builds
require `cuda-toolkit[cublas,cudart,…]==13.0.2`, which brings unsuffixed ones
(`nvidia-cublas 13.1.0.3`), beside four suffixed ones (`nvidia-cudnn-cu13`, …). Other
packages bring `-cuNN` names of their own whatever torch's CUDA is: nvidia-cutlass-dsl
requires `nvidia-cutlass-dsl-libs-cu12` always and `-cu13` with its `[cu13]` extra. So the
CUDA major a lock pins torch to is read from torch's own library families only.

(The agent, shipped alone and stdlib-only, reads torch's requirements with its own copy.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# The CUDA libraries torch's wheels require, by family (nvidia-<family>[-cuNN]).
TORCH_CUDA_FAMILIES = frozenset(
    {
        "cublas",
        "cuda-cupti",
        "cuda-nvrtc",
        "cuda-runtime",
        "cudnn",
        "cufft",
        "cufile",
        "curand",
        "cusolver",
        "cusparse",
        "cusparselt",
        "nccl",
        "nvjitlink",
        "nvshmem",
        "nvtx",
    }
)
# Unsuffixed families whose version is the toolkit's (nvidia-cublas 13.1.0.3 is CUDA 13).
# The others carry versions of their own: CUDA 13.0 brings nvidia-cufft 12.0.0.61,
# nvidia-cusparse 12.6.3.3 and nvidia-curand 10.4.0.35, so their major says nothing.
TOOLKIT_VERSIONED = frozenset(
    {"cublas", "cuda-cupti", "cuda-nvrtc", "cuda-runtime", "nvjitlink", "nvtx"}
)
NVIDIA_RE = re.compile(r"^nvidia-([a-z0-9-]+?)-cu(\d+)$")
MAJOR_RE = re.compile(r"^(\d+)\.")


def is_cuda_library(name: str) -> bool:
    """Any CUDA library package (canonical name): `nvidia-*-cuNN`, torch's unsuffixed
    families and cuda-toolkit. For grouping in reports; `cuda_majors` decides the major."""
    return NVIDIA_RE.match(name) is not None or is_torch_cuda_library(name)


def is_torch_cuda_library(name: str) -> bool:
    """One of torch's CUDA library families, suffixed or not, or cuda-toolkit."""
    if name == "cuda-toolkit":
        return True
    suffixed = NVIDIA_RE.match(name)
    family = suffixed.group(1) if suffixed else name.removeprefix("nvidia-")
    return name.startswith("nvidia-") and family in TORCH_CUDA_FAMILIES


def cuda_major(name: str, version: str) -> str | None:
    """The CUDA major a package of torch's CUDA families ties torch to; None when it is not
    one, or when its version does not say (unsuffixed nvidia-cufft, …)."""
    suffixed = NVIDIA_RE.match(name)
    if suffixed:
        return suffixed.group(2) if suffixed.group(1) in TORCH_CUDA_FAMILIES else None
    family = name.removeprefix("nvidia-")
    if name == "cuda-toolkit" or (name.startswith("nvidia-") and family in TOOLKIT_VERSIONED):
        major = MAJOR_RE.match(version)
        return major.group(1) if major else None
    return None


def cuda_majors(packages: Mapping[str, str]) -> set[str]:
    """The CUDA majors torch's library families name among `packages` (name -> version)."""
    return {m for name, version in packages.items() if (m := cuda_major(name, version))}
