"""CUDA as package names show it: which packages are torch's CUDA libraries, and which major
a lock pins torch to (read from torch's own library families only).

The rule is written once, in the agent (envlock/agent/cuda.py), which reads torch's installed
requirements on a target with it; the controller reads locks with the same functions.
"""

from envlock.agent.cuda import (
    TOOLKIT_VERSIONED,
    TORCH_CUDA_FAMILIES,
    cuda_major,
    cuda_majors,
    is_cuda_library,
    is_torch_cuda_library,
)

__all__ = [
    "TOOLKIT_VERSIONED",
    "TORCH_CUDA_FAMILIES",
    "cuda_major",
    "cuda_majors",
    "is_cuda_library",
    "is_torch_cuda_library",
]
