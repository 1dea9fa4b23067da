"""Writing throwaway envlock projects (profile + scripts) for tests and benchmarks."""

from __future__ import annotations

import json
from pathlib import Path


def toml_list(items: list[str]) -> str:
    return json.dumps(items)


def write_seed_project(
    base: Path,
    wheelhouse: Path,
    *,
    name: str = "seed",
    backend: str = "cu128",
    packages: tuple[str, ...] = ("trainutil", "tinydep==1.0"),
    env: dict[str, str] | None = None,
    scripts: dict[str, str] | None = None,
) -> Path:
    """A local-target profile resolved offline from the test wheelhouse; returns its path."""
    base.mkdir(parents=True, exist_ok=True)
    scripts = {"train.py": "print('training')\n"} if scripts is None else scripts
    (base / "scripts").mkdir(exist_ok=True)
    for rel, text in scripts.items():
        (base / "scripts" / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / "scripts" / rel).write_text(text)
    lines = [
        torch_profile_text(
            name,
            torch="2.11.0",
            backend=backend,
            packages=packages,
            find_links=(str(wheelhouse),),
            offline=True,
        )
    ]
    if env:
        lines += ["[env]"] + [f"{k} = {json.dumps(v)}" for k, v in env.items()] + [""]
    if scripts:
        lines += [
            "[scripts]",
            'source = "scripts"',
            'dest = "deployed"',
            f"files = {toml_list(sorted(scripts))}",
            "",
        ]
    profile = base / f"{name}.toml"
    profile.write_text("\n".join(lines))
    return profile


def torch_profile_text(
    name: str,
    *,
    torch: str | None = "2.13.0",
    backend: str = "cpu",
    packages: tuple[str, ...] = (),
    find_links: tuple[str, ...] = (),
    offline: bool = False,
    extra: str = "",
) -> str:
    """A local-target profile with torch (none when `torch` is None), root and venv beside
    the profile. Without find-links, real torch comes through the machine's find-links or
    the backend's index."""
    dependencies = []
    if packages or find_links:
        dependencies = ["[dependencies]", f"packages = {toml_list(list(packages))}"]
        if find_links:
            dependencies.append(f"find-links = {toml_list(list(find_links))}")
        dependencies += ["offline = true"] if offline else []
        dependencies.append("")
    return "\n".join(
        [
            "[profile]",
            f'name = "{name}"',
            "",
            "[target]",
            'type = "local"',
            'root = "root"',
            'venv = "venv"',
            "",
            "[python]",
            'version = "3.11"',
            "",
            *(["[torch]", f'version = "{torch}"', f'backend = "{backend}"', ""] if torch else []),
            *dependencies,
            extra,
        ]
    )


def compile_env(work: Path) -> dict[str, str]:
    """The caller's environment for runs that compile with torch: without compile-cache
    settings of its own; bytecode written to a prefix in `work` even where the image sets
    PYTHONDONTWRITEBYTECODE (else every run recompiles torch's sources, ~15 s); TMPDIR in
    `work`, since inductor keeps CPU precompiled headers (~150 MB per venv path) under
    $TMPDIR/torchinductor_$USER, outside TORCHINDUCTOR_CACHE_DIR."""
    import os

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TORCHINDUCTOR_", "TRITON_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(work / "tmp")
    return env
