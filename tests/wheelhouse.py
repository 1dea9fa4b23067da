"""Small, real wheelhouses built by the suite, in two flat directories.

`build_wheelhouse`: the synthetic one. torch 2.11.0 as +cu128, +cu130 and +cpu variants (as
the PyTorch indexes label them), the nvidia-*-cu12 / -cu13 libraries they require, training
deps, and "sglang" 0.5.0, a polluter that swaps torch's CUDA build.

`build_pypi_wheelhouse`: PyPI's own packages as they really are (names, versions,
Requires-Dist with markers and extras, torch/version.py), see TESTING.md "Real torch
packages": torch 2.9.1 and 2.10.0 (CUDA 12.8, 15 suffixed nvidia-*-cu12 libraries; 2.10.0
adds cuda-bindings), 2.11.0 and 2.14.1 (CUDA 13.0: cuda-toolkit[…]==13.0.2 brings unsuffixed
nvidia-cublas, nvidia-cuda-runtime, …, beside four -cu13 ones), the packages they pull,
and sglang 0.5.23 (pins torch==2.14.1 and pulls nvidia-cutlass-dsl-libs-cu12 and -cu13) and
sglang 0.5.2 (needs no torch: compatible with 2.11.0). PyPI's CUDA wheels carry no local
label; only version.py and the requirements show the build.

Two directories, because `torch==2.11.0` matches every local version and uv picks the
highest: beside the labelled variants, PyPI's unlabelled 2.11.0 could never be locked.

The wheels are tiny but genuine (METADATA, WHEEL, RECORD with hashes) and byte-identical
from run to run, so locks resolved from them are deterministic.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

FIXED_TIME = (2026, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_wheel(
    dest: Path,
    name: str,
    version: str,
    requires: list[str] | None = None,
    files: dict[str, str] | None = None,
    extras: list[str] | None = None,
) -> Path:
    """Write one py3-none-any wheel; returns its path."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    contents: dict[str, bytes] = {
        path: text.encode() for path, text in (files or {f"{dist}/__init__.py": ""}).items()
    }
    if not any(path.startswith(f"{dist}/") for path in contents):
        contents[f"{dist}/__init__.py"] = b""
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Provides-Extra: {extra}" for extra in extras or []]
    metadata += [f"Requires-Dist: {req}" for req in requires or []]
    contents[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    contents[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: envlock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in contents.items()]
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = dest / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in contents.items():
            item = zipfile.ZipInfo(path, date_time=FIXED_TIME)
            item.external_attr = 0o644 << 16
            archive.writestr(item, data, zipfile.ZIP_DEFLATED)
    return wheel


def build_pinned(dest: Path, pins: list[str]) -> None:
    """One dependency-free wheel per `name==version`."""
    for pin in pins:
        name, version = pin.split("==")
        build_wheel(dest, name, version)


TORCH_INIT = "from torch.version import __version__\nfrom torch import version\n"


def torch_files(version: str, cuda: str | None) -> dict[str, str]:
    cuda_text = repr(cuda)
    return {
        "torch/__init__.py": TORCH_INIT,
        "torch/version.py": f"__version__ = {version!r}\ncuda = {cuda_text}\n"
        "hip = None\ngit_version = 'envlock-test'\n",
        "torch/lib/libtorch_stub.txt": f"stand-in for the {version} shared libraries\n" * 64,
    }


def build_wheelhouse(dest: Path) -> Path:
    """The synthetic wheelhouse: torch variants, CUDA libraries, training deps, a polluter."""
    dest.mkdir(parents=True, exist_ok=True)
    cu12 = ["nvidia-cublas-cu12==12.8.4.1", "nvidia-cuda-runtime-cu12==12.8.90"]
    cu13 = ["nvidia-cublas-cu13==13.0.2.14", "nvidia-cuda-runtime-cu13==13.0.96"]
    build_wheel(
        dest, "torch", "2.11.0+cu128", [*cu12, "filelock>=3"], torch_files("2.11.0+cu128", "12.8")
    )
    build_wheel(
        dest, "torch", "2.11.0+cu130", [*cu13, "filelock>=3"], torch_files("2.11.0+cu130", "13.0")
    )
    build_wheel(dest, "torch", "2.11.0+cpu", ["filelock>=3"], torch_files("2.11.0+cpu", None))
    build_pinned(dest, [*cu12, *cu13])
    build_wheel(dest, "filelock", "3.20.0")
    build_wheel(dest, "tinydep", "0.9", files={"tinydep/__init__.py": "VERSION = '0.9'\n"})
    build_wheel(dest, "tinydep", "1.0", files={"tinydep/__init__.py": "VERSION = '1.0'\n"})
    build_wheel(
        dest,
        "trainutil",
        "2.0",
        ["tinydep>=0.9"],
        {"trainutil/__init__.py": "import tinydep\nNAME = 'trainutil'\n"},
    )
    # The polluter: installing it swaps torch's CUDA build and drags in two extras.
    build_wheel(
        dest,
        "sglang",
        "0.5.0",
        ["torch==2.11.0+cu130", "flashinfer-python==0.2.0", "sgl-kernel==0.3.0"],
    )
    build_wheel(dest, "flashinfer-python", "0.2.0")
    build_wheel(dest, "sgl-kernel", "0.3.0")
    return dest


# -- PyPI's own packages ------------------------------------------------------------------
LINUX = '; platform_system == "Linux"'
TORCH_EXTRAS = ["optree", "opt-einsum", "pyyaml"]
TORCH_EXTRA_REQUIRES = [
    'optree>=0.13.0; extra == "optree"',
    'opt-einsum>=3.3; extra == "opt-einsum"',
    'pyyaml; extra == "pyyaml"',
]
# The pure-Python requirements every torch has (setuptools only on Python >= 3.12).
TORCH_COMMON = [
    "filelock",
    "typing-extensions>=4.10.0",
    "sympy>=1.13.3",
    "networkx>=2.5.1",
    "jinja2",
    "fsspec>=0.8.5",
]
COMMON_PINS = [
    "filelock==3.20.0",
    "typing-extensions==4.15.0",
    "mpmath==1.3.0",
    "networkx==3.5",
    "markupsafe==3.0.3",
    "fsspec==2025.10.0",
]
# CUDA 12.8 builds (2.9.1, 2.10.0): fifteen suffixed libraries (nvshmem differs, see below).
CU128_LIBRARIES = [
    "nvidia-cuda-nvrtc-cu12==12.8.93",
    "nvidia-cuda-runtime-cu12==12.8.90",
    "nvidia-cuda-cupti-cu12==12.8.90",
    "nvidia-cudnn-cu12==9.10.2.21",
    "nvidia-cublas-cu12==12.8.4.1",
    "nvidia-cufft-cu12==11.3.3.83",
    "nvidia-curand-cu12==10.3.9.90",
    "nvidia-cusolver-cu12==11.7.3.90",
    "nvidia-cusparse-cu12==12.5.8.93",
    "nvidia-cusparselt-cu12==0.7.1",
    "nvidia-nccl-cu12==2.27.5",
    "nvidia-nvtx-cu12==12.8.90",
    "nvidia-nvjitlink-cu12==12.8.93",
    "nvidia-cufile-cu12==1.13.1.3",
]
# cuda-toolkit 13.0.2's extras and the unsuffixed library each one pins.
CUDA_TOOLKIT_13 = {
    "cublas": "nvidia-cublas==13.1.0.3",
    "cudart": "nvidia-cuda-runtime==13.0.96",
    "cufft": "nvidia-cufft==12.0.0.61",
    "cufile": "nvidia-cufile==1.15.1.6",
    "cupti": "nvidia-cuda-cupti==13.0.85",
    "curand": "nvidia-curand==10.4.0.35",
    "cusolver": "nvidia-cusolver==12.0.4.66",
    "cusparse": "nvidia-cusparse==12.6.3.3",
    "nvjitlink": "nvidia-nvjitlink==13.0.88",
    "nvrtc": "nvidia-cuda-nvrtc==13.0.88",
    "nvtx": "nvidia-nvtx==13.0.85",
}
CU130_SUFFIXED = [
    "nvidia-cudnn-cu13==9.19.0.56",
    "nvidia-cusparselt-cu13==0.8.0",
    "nvidia-nccl-cu13==2.28.9",
    "nvidia-nvshmem-cu13==3.4.5",
]


def pypi_torch_files(version: str, cuda: str, *, annotated: bool = False) -> dict[str, str]:
    """torch/version.py as PyPI's CUDA wheels have it: the label only here, annotations."""
    reported = f"{version}+cu{cuda.replace('.', '')}"
    assign = f"__version__: str = {reported!r}" if annotated else f"__version__ = {reported!r}"
    version_py = (
        "from typing import Optional\n\n"
        "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
        f"{assign}\ndebug = False\ncuda: Optional[str] = {cuda!r}\n"
        "git_version = 'envlock-test'\nhip: Optional[str] = None\n"
        "rocm: Optional[str] = None\nxpu: Optional[str] = None\n"
    )
    return {
        "torch/__init__.py": TORCH_INIT,
        "torch/version.py": version_py,
        "torch/lib/libtorch_stub.txt": f"stand-in for the {reported} shared libraries\n" * 64,
    }


def cu128_requires(nvshmem: str, triton: str, extra: tuple[str, ...] = ()) -> list[str]:
    libraries = [*CU128_LIBRARIES, f"nvidia-nvshmem-cu12=={nvshmem}", *extra]
    return [
        *TORCH_COMMON,
        'setuptools; python_version >= "3.12"',
        *(lib + LINUX for lib in libraries),
        f"triton=={triton}{LINUX}",
        *TORCH_EXTRA_REQUIRES,
    ]


def cu130_requires(triton: str) -> list[str]:
    toolkit = f"cuda-toolkit[{','.join(CUDA_TOOLKIT_13)}]==13.0.2"
    return [
        *TORCH_COMMON,
        'setuptools<82; python_version >= "3.12"',
        toolkit + LINUX,
        "cuda-bindings<14,>=13.0.3" + LINUX,
        *(lib + LINUX for lib in CU130_SUFFIXED),
        f"triton=={triton}{LINUX}",
        *TORCH_EXTRA_REQUIRES,
    ]


def build_pypi_torch(dest: Path) -> None:
    """torch 2.9.1 / 2.10.0 (CUDA 12.8) and 2.11.0 / 2.14.1 (CUDA 13.0), as PyPI has them."""
    builds = [
        ("2.9.1", "12.8", cu128_requires("3.3.20", "3.5.1")),
        ("2.10.0", "12.8", cu128_requires("3.4.5", "3.6.0", ("cuda-bindings==12.9.4",))),
        ("2.11.0", "13.0", cu130_requires("3.6.0")),
        # 2.14.1 keeps 2.11.0's CUDA 13.0 pins; its version.py annotates __version__ too.
        ("2.14.1", "13.0", cu130_requires("3.6.0")),
    ]
    for version, cuda, requires in builds:
        files = pypi_torch_files(version, cuda, annotated=version == "2.14.1")
        build_wheel(dest, "torch", version, requires, files, TORCH_EXTRAS)


def build_cuda_libraries(dest: Path) -> None:
    """The libraries both CUDA majors bring, cuda-toolkit 13.0.2 and cuda-bindings."""
    build_pinned(dest, CU128_LIBRARIES)
    build_pinned(dest, ["nvidia-nvshmem-cu12==3.3.20", "nvidia-nvshmem-cu12==3.4.5"])
    build_pinned(dest, [*CUDA_TOOLKIT_13.values(), *CU130_SUFFIXED])
    toolkit = [f'{pin}.*; extra == "{extra}"' for extra, pin in CUDA_TOOLKIT_13.items()]
    build_wheel(dest, "cuda-toolkit", "13.0.2", toolkit, extras=list(CUDA_TOOLKIT_13))
    for version in ("12.9.4", "13.2.0"):
        build_wheel(dest, "cuda-bindings", version, ["cuda-pathfinder~=1.1"])
    build_pinned(dest, ["cuda-pathfinder==1.5.4", "triton==3.5.1", "triton==3.6.0"])


def build_pypi_common(dest: Path) -> None:
    """torch's pure-Python requirements and what sglang needs besides torch."""
    build_pinned(dest, COMMON_PINS)
    build_wheel(dest, "sympy", "1.14.0", ["mpmath<1.4,>=1.1.0"])
    build_wheel(dest, "jinja2", "3.1.6", ["MarkupSafe>=2.0"])
    build_pinned(
        dest,
        [
            "aiohttp==3.13.2",
            "requests==2.32.5",
            "tqdm==4.67.1",
            "numpy==2.3.4",
            "ipython==9.6.0",
            "setproctitle==1.3.7",
        ],
    )


SGLANG_COMMON = ["aiohttp", "requests", "tqdm", "numpy", "IPython", "setproctitle"]


def build_sglang(dest: Path) -> None:
    """sglang 0.5.23 and what it pins (the cutlass DSL's -cu12 and -cu13 libraries), and
    0.5.2, whose base requirements name no torch (that was its [srt] extra)."""
    build_wheel(
        dest,
        "sglang",
        "0.5.23",
        [
            *SGLANG_COMMON,
            "torch==2.14.1",
            "flashinfer_python[cu13]==0.7.2",
            "nvidia-cutlass-dsl[cu13]==4.8.0",
            "sglang-kernel==0.4.10",
        ],
    )
    srt = ["sgl-kernel==0.3.9.post2", "torch==2.8.0", "flashinfer_python==0.3.1"]
    build_wheel(
        dest,
        "sglang",
        "0.5.2",
        [*SGLANG_COMMON, *(f'{req}; extra == "srt"' for req in srt)],
        extras=["srt"],
    )
    build_wheel(dest, "sglang-kernel", "0.4.10")
    build_wheel(
        dest,
        "flashinfer-python",
        "0.7.2",
        [
            "numpy",
            "requests",
            "torch",
            "tqdm",
            "nvidia-cudnn-frontend>=1.13.0",
            "nvidia-cutlass-dsl>=4.8.0",
            'nvidia-cutlass-dsl[cu13]>=4.8.0; extra == "cu13"',
        ],
        extras=["cu13"],
    )
    build_wheel(
        dest,
        "nvidia-cutlass-dsl",
        "4.8.0",
        [
            "nvidia-cutlass-dsl-libs-base==4.8.0",
            "nvidia-cutlass-dsl-libs-cu12==4.8.0",
            'nvidia-cutlass-dsl-libs-cu13==4.8.0; extra == "cu13"',
            "numpy",
            "typing-extensions",
        ],
        extras=["cu13"],
    )
    build_pinned(
        dest,
        [
            "nvidia-cutlass-dsl-libs-base==4.8.0",
            "nvidia-cutlass-dsl-libs-cu12==4.8.0",
            "nvidia-cutlass-dsl-libs-cu13==4.8.0",
            "nvidia-cudnn-frontend==1.18.0",
        ],
    )


def build_pypi_wheelhouse(dest: Path) -> Path:
    """PyPI's torch builds and what they and sglang pull, mirrored small (self-contained)."""
    dest.mkdir(parents=True, exist_ok=True)
    build_pypi_torch(dest)
    build_cuda_libraries(dest)
    build_pypi_common(dest)
    build_sglang(dest)
    return dest


# -- an sdist, for what building from source runs ---------------------------------------------
SDIST_BACKEND = '''"""A PEP 517 backend in the sdist itself: stdlib only, so it builds offline."""
import base64, hashlib, os, zipfile

NAME, VERSION, CANARY = {name!r}, {version!r}, {canary!r}


def ran(hook):
    # Building runs the package's own code: each hook leaves a line behind.
    with open(CANARY, "a") as handle:
        handle.write(hook + "\\n")


def files():
    info = NAME + "-" + VERSION + ".dist-info"
    meta = "Metadata-Version: 2.1\\nName: " + NAME + "\\nVersion: " + VERSION + "\\n"
    wheel = "Wheel-Version: 1.0\\nGenerator: envlock-tests\\n"
    wheel += "Root-Is-Purelib: true\\nTag: py3-none-any\\n"
    return {{
        NAME + "/__init__.py": b"BUILT_FROM_SOURCE = True\\n",
        info + "/METADATA": meta.encode(),
        info + "/WHEEL": wheel.encode(),
    }}


def get_requires_for_build_wheel(config_settings=None):
    ran("get_requires_for_build_wheel")
    return []


def prepare_metadata_for_build_wheel(directory, config_settings=None):
    ran("prepare_metadata_for_build_wheel")
    info = NAME + "-" + VERSION + ".dist-info"
    os.makedirs(os.path.join(directory, info))
    for path, data in files().items():
        if path.startswith(info):
            with open(os.path.join(directory, path), "wb") as handle:
                handle.write(data)
    return info


def build_wheel(directory, config_settings=None, metadata_directory=None):
    ran("build_wheel")
    contents = files()
    info = NAME + "-" + VERSION + ".dist-info"
    digest = lambda data: "sha256=" + base64.urlsafe_b64encode(
        hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record = [p + "," + digest(d) + "," + str(len(d)) for p, d in contents.items()]
    contents[info + "/RECORD"] = ("\\n".join(record + [info + "/RECORD,,"]) + "\\n").encode()
    name = NAME + "-" + VERSION + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as archive:
        for path, data in contents.items():
            archive.writestr(path, data)
    return name
'''


def build_sdist(dest: Path, name: str, version: str, canary: Path) -> Path:
    """Write NAME-VERSION.tar.gz whose in-tree backend appends to `canary` whenever any of its
    hooks runs (a lock or an install that builds it); returns its path."""
    import io
    import tarfile

    top = f"{name}-{version}"
    pyproject = (
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\n'
    )
    members = {
        "pyproject.toml": pyproject,
        "backend.py": SDIST_BACKEND.format(name=name, version=version, canary=str(canary)),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    sdist = dest / f"{top}.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for rel, text in members.items():
            data = text.encode()
            item = tarfile.TarInfo(f"{top}/{rel}")
            item.size, item.mtime, item.mode = len(data), 0, 0o644
            archive.addfile(item, io.BytesIO(data))
    return sdist
