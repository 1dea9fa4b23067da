"""CUDA as package names show it: which packages are torch's CUDA libraries, and which major.

torch's CUDA 12 builds require suffixed libraries (`nvidia-cublas-cu12`); its CUDA 13 builds
require `cuda-toolkit[cublas,cudart,…]==13.0.2`, which brings unsuffixed ones
(`nvidia-cublas 13.1.0.3`), beside four suffixed ones (`nvidia-cudnn-cu13`, …). Other
packages bring `-cuNN` names of their own whatever torch's CUDA is: nvidia-cutlass-dsl
requires `nvidia-cutlass-dsl-libs-cu12` always and `-cu13` with its `[cu13]` extra. So the
CUDA major torch is built for is read from torch's own library families only: in a lock
(envlock/base/cuda.py gives these functions to the controller) and in torch's installed
requirements (the probe's `required_cuda_majors`).

Stdlib only, Python 3.8+: shipped with the agent.
"""

import re

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
# Packages versioned like the toolkit itself. In a lock, cuda-toolkit; in torch's own
# requirements cuda-bindings too (its pin is the build's: `cuda-bindings==12.9.4`), while a
# lock's cuda-bindings may come from another package and is not counted.
TOOLKIT = ("cuda-toolkit",)
NVIDIA_RE = re.compile(r"^nvidia-([a-z0-9-]+?)-cu(\d+)$")
MAJOR_RE = re.compile(r"^(\d+)\.")


def is_cuda_library(name):
    """Any CUDA library package (canonical name): `nvidia-*-cuNN`, torch's unsuffixed
    families and cuda-toolkit. For grouping in reports; `cuda_majors` decides the major."""
    return NVIDIA_RE.match(name) is not None or is_torch_cuda_library(name)


def is_torch_cuda_library(name):
    """One of torch's CUDA library families, suffixed or not, or cuda-toolkit."""
    if name in TOOLKIT:
        return True
    return name.startswith("nvidia-") and nvidia_family(name) in TORCH_CUDA_FAMILIES


def nvidia_family(name):
    """nvidia-cublas-cu12 → cublas, nvidia-cublas → cublas (a name of nvidia's)."""
    suffixed = NVIDIA_RE.match(name)
    return suffixed.group(1) if suffixed else name[len("nvidia-") :]


def cuda_major(name, version, toolkit=TOOLKIT):
    """The CUDA major a package of torch's CUDA families ties torch to; None when it is not
    one, or when its version does not say (unsuffixed nvidia-cufft, …). `version` is the
    package's, or what a requirement pins it to; `toolkit`: the names versioned like CUDA."""
    suffixed = NVIDIA_RE.match(name)
    if suffixed:
        return suffixed.group(2) if suffixed.group(1) in TORCH_CUDA_FAMILIES else None
    family = name[len("nvidia-") :] if name.startswith("nvidia-") else None
    if name in toolkit or family in TOOLKIT_VERSIONED:
        major = MAJOR_RE.match(version)
        return major.group(1) if major else None
    return None


def cuda_majors(packages):
    """The CUDA majors torch's library families name among `packages` (name -> version)."""
    return {m for name, version in packages.items() if (m := cuda_major(name, version))}
