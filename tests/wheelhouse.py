"""A small, real wheelhouse built by the suite: torch 2.11.0 as +cu128 and +cu130 variants.

The wheels are tiny but genuine (METADATA, WHEEL, RECORD with hashes) and byte-identical
from run to run, so locks resolved from them are deterministic. The torch variants carry
`torch/version.py` like the real ones and require nvidia-*-cu12 or -cu13 packages, which is
how a CUDA-major change shows in the dependency graph.
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


def torch_files(version: str, cuda: str | None) -> dict[str, str]:
    cuda_text = repr(cuda)
    return {
        "torch/__init__.py": "from torch.version import __version__\nfrom torch import version\n",
        "torch/version.py": f"__version__ = {version!r}\ncuda = {cuda_text}\n"
        "hip = None\ngit_version = 'envlock-test'\n",
        "torch/lib/libtorch_stub.txt": f"stand-in for the {version} shared libraries\n" * 64,
    }


def build_wheelhouse(dest: Path) -> Path:
    """The test wheelhouse: torch variants, CUDA libraries, training deps and a polluter."""
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
    for lib in (
        "nvidia-cublas-cu12==12.8.4.1",
        "nvidia-cuda-runtime-cu12==12.8.90",
        "nvidia-cublas-cu13==13.0.2.14",
        "nvidia-cuda-runtime-cu13==13.0.96",
    ):
        name, version = lib.split("==")
        build_wheel(dest, name, version)
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
