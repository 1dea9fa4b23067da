"""Compile caches end to end with real CPU torch: inductor compiles with gcc, through the CLI.

One environment (torch 2.13.0+cpu from this machine's find-links) is locked and applied
once per module into root A; fresh roots B and C apply the same lock (fast: uv's cache).
Whether a compile came from the cache is read from torch's own counters
(`torch._dynamo.utils.counters["inductor"]["fxgraph_cache_hit"/"fxgraph_cache_miss"]`),
which the compiled script prints as JSON: never from timings.

What a hit spares on CPU (torch 2.13, read in torch/_inductor/codecache.py): an FX graph
hit skips tracing, lowering and code generation, but the C++ kernels are .so files built by
gcc and keyed by their source plus the whole compiler command line, which holds the venv's
include paths (CppCodeCache.load_async, get_hashable_command_line). In a root at another
path the restored kernels are reused but each graph's Python-binding module (`*.main.so`)
is rebuilt; the mega-cache carries no .so files at all (only triton kernels are bundled
into FX graph entries, for GPUs), so after loading it gcc builds every kernel again. The
counters check what envlock controls: that torch finds the entries it was given.

The tests share the module's roots and run in file order; each sets up what it depends on
through the module's fixtures, so any one of them also runs alone.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envlock.startup import envlock_megacache
from tests.conftest import run_envlock
from tests.json_shapes import conforms
from tests.projects import compile_env, torch_profile_text
from tests.support import TORCH_CPU_VERSION

pytestmark = pytest.mark.slow

TORCH_VERSION = TORCH_CPU_VERSION.split("+")[0]


# The suite's stand-in torch (tests/wheelhouse.py): installs, reports its build, can't compile.
FAKE_EXTRA = """
[dependencies]
find-links = ["{wheelhouse}"]
offline = true
"""

# A couple of Linear layers, a few forward steps through torch.compile (inductor, C++ on
# CPU). Prints one JSON line: inductor's cache counters, the cache dirs it was given, the
# time of the first compiled call, and what `envlock_megacache.save` wrote when asked to.
SCRIPT = """\
import json
import os
import sys
import time

import torch
from torch._dynamo.utils import counters

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
compiled = torch.compile(model)
x = torch.randn(8, 16)
with torch.no_grad():
    started = time.perf_counter()
    compiled(x)
    first_step_s = time.perf_counter() - started
    for _ in range(3):
        compiled(x)
result = {
    "hit": counters["inductor"]["fxgraph_cache_hit"],
    "miss": counters["inductor"]["fxgraph_cache_miss"],
    "first_step_s": first_step_s,
    "inductor_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
    "triton_dir": os.environ.get("TRITON_CACHE_DIR"),
}
if len(sys.argv) > 1:
    import envlock_megacache  # on PYTHONPATH under `envlock run`

    result["saved"] = envlock_megacache.save(sys.argv[1])
print(json.dumps(result))
"""


class Project:
    """A profile in its own directory, its root beside it; the CLI run as a user runs it."""

    def __init__(self, directory: Path, env: dict[str, str], name: str = "cachetest") -> None:
        self.dir = directory
        self.env = env
        self.profile = directory / f"{name}.toml"
        self.root = directory / "root"

    def write(self, torch: str = TORCH_VERSION, extra: str = "") -> Project:
        self.dir.mkdir(parents=True, exist_ok=True)
        name = self.profile.stem
        self.profile.write_text(torch_profile_text(name, torch=torch, extra=extra))
        return self

    def envlock(
        self, *args: str | Path, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run_envlock(*args, env=self.env if env is None else env)

    def ok(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        result = self.envlock(*args)
        assert result.returncode == 0, (
            f"envlock {' '.join(map(str, args))}: exit {result.returncode}\n"
            f"{result.stdout}\n{result.stderr}"
        )
        return result

    def apply(self) -> None:
        self.ok("apply", "-y", self.profile)

    def status(self) -> dict[str, Any]:
        return json.loads(self.ok("cache", self.profile, "status", "--json").stdout)

    def check(self, env: dict[str, str] | None = None) -> dict[str, Any]:
        result = self.envlock("check", "--json", self.profile, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        return json.loads(result.stdout)

    def run(
        self, *argv: str | Path, artifacts: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        options: list[str | Path] = ["--compile-artifacts", artifacts] if artifacts else []
        result = self.envlock("run", self.profile, *options, "--", *argv)
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stderr}"
        return result

    def compile(self, script: Path, *args: str | Path, artifacts: Path | None = None) -> Compiled:
        """Run the compile script under `envlock run`; its JSON line and stderr."""
        return Compiled(self.run("python", script, *args, artifacts=artifacts))


class Compiled:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.stderr = proc.stderr
        lines = proc.stdout.strip().splitlines()
        assert lines, f"the compile script printed nothing\n{proc.stderr}"
        self.data: dict[str, Any] = json.loads(lines[-1])

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


def active_entry(status: dict[str, Any]) -> dict[str, Any]:
    (entry,) = [d for d in status["dirs"] if d["active"]]
    return entry


def entry_for(status: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    (entry,) = [d for d in status["dirs"] if d["id"] == fingerprint]
    return entry


def generation(project: Project) -> Path:
    return Path(os.path.realpath(project.root / "current"))


def fresh_root(
    work: Path, name: str, env: dict[str, str], lock: Path, bytecode_of: Project | None = None
) -> Project:
    """Another root applying the very same lock (copied, not re-resolved).

    With `bytecode_of`, that root's torch bytecode (under PYTHONPYCACHEPREFIX, keyed by
    source path) is hardlinked to the new generation's paths. Where a source is the same
    file hardlinked from uv's cache (torch's are: same mtime and size) the .pyc is valid
    and the fresh root's first run is spared ~15 s of recompiling torch to bytecode; where
    it isn't, Python just recompiles it. Only bytecode is shared, no compile cache.
    """
    project = Project(work / name, env).write()
    shutil.copy(lock, project.dir / lock.name)
    project.apply()
    if bytecode_of is not None:
        prefix = Path(env["PYTHONPYCACHEPREFIX"])
        source = prefix / generation(bytecode_of).relative_to("/")
        if source.is_dir():
            dest = prefix / generation(project).relative_to("/")
            shutil.copytree(source, dest, copy_function=link_unless_present, dirs_exist_ok=True)
    return project


def link_unless_present(source: str, dest: str) -> None:
    """Hardlink bytecode across roots; bytecode already there (an installer that compiles,
    e.g. with UV_COMPILE_BYTECODE set) is as good."""
    if not os.path.exists(dest):
        os.link(source, dest)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("cache")
    (work / "compile_step.py").write_text(SCRIPT)
    return work


@pytest.fixture(scope="module")
def env(work: Path) -> dict[str, str]:
    return compile_env(work)


@pytest.fixture(scope="module")
def script(work: Path) -> Path:
    return work / "compile_step.py"


@pytest.fixture(scope="module")
def root_a(work: Path, env: dict[str, str]) -> Project:
    """The module's environment: real CPU torch, locked and applied once."""
    project = Project(work / "a", env).write()
    project.ok("lock", project.profile)
    project.apply()
    return project


@pytest.fixture(scope="module")
def lock(root_a: Project) -> Path:
    return root_a.dir / f"pylock.{root_a.profile.stem}.toml"


@pytest.fixture(scope="module")
def compiled(root_a: Project, script: Path, work: Path) -> dict[str, Any]:
    """Root A compiled twice (cold, then warm), its mega-cache and its cache archived."""
    before = root_a.status()
    first = root_a.compile(script, work / "artifacts.bin")
    after_first = root_a.status()
    second = root_a.compile(script)
    saved = root_a.ok("cache", root_a.profile, "save", work / "cache.tar.gz", "--json")
    conforms("cache-save", json.loads(saved.stdout))
    return {
        "before": before,
        "first": first,
        "after_first": after_first,
        "second": second,
        "archive": work / "cache.tar.gz",
        "artifacts": work / "artifacts.bin",
        "fingerprint": active_entry(before)["id"],
    }


@pytest.fixture(scope="module")
def fake_a(root_a: Project, compiled: dict[str, Any], wheelhouse: Path) -> Project:
    """A second profile on root A: the suite's fake torch 2.11.0+cpu (another build)."""
    project = Project(root_a.dir, root_a.env, name="cachetest-fake")
    project.write(torch="2.11.0", extra=FAKE_EXTRA.format(wheelhouse=wheelhouse))
    project.ok("lock", project.profile)
    return project


# -- (a) the first compiled run fills the build's own directory -----------------------------
def test_first_compile_populates_the_fingerprint_dir(
    root_a: Project, compiled: dict[str, Any]
) -> None:
    before, after = compiled["before"], compiled["after_first"]
    entry = active_entry(before)
    assert entry["id"].startswith(f"torch-{TORCH_CPU_VERSION}-")
    assert entry["dir"] == str(root_a.root / "cache" / entry["id"])
    assert entry["files"] == 0, "apply creates the dir empty"
    assert (Path(entry["dir"]) / "inductor").is_dir() and (Path(entry["dir"]) / "triton").is_dir()
    assert before["active_parts"] == {
        "torch": TORCH_CPU_VERSION,
        "triton": None,
        "cuda": None,
        "gpus": [],
    }
    # envlock run pointed torch at the build's directory, and torch wrote there.
    first = compiled["first"]
    assert first["inductor_dir"] == os.path.join(entry["dir"], "inductor")
    assert first["triton_dir"] == os.path.join(entry["dir"], "triton")
    warm = active_entry(after)
    assert warm["id"] == entry["id"]
    assert warm["files"] > 0 and warm["bytes"] > 0
    assert warm["last_used"] is not None
    assert list((Path(entry["dir"]) / "inductor" / "fxgraph").rglob("*")), "no FX graph entry"
    assert warm["generations"] == [before["current"]]


# -- (b) the second run is served from that directory ----------------------------------------
def test_second_run_hits_the_cache(compiled: dict[str, Any]) -> None:
    first, second = compiled["first"], compiled["second"]
    assert first["miss"] >= 1 and first["hit"] == 0, first.data
    assert second["hit"] >= 1 and second["miss"] == 0, second.data


# -- (g) check warns about a cold cache and about variables pointing elsewhere ---------------
def test_check_warns_about_cold_cache_and_foreign_cache_vars(
    work: Path, env: dict[str, str], lock: Path, root_a: Project, compiled: dict[str, Any]
) -> None:
    cold = fresh_root(work, "g", env, lock)
    # A cache that was never warm (every fresh environment) says nothing...
    assert cold.check()["warnings"] == []
    cold_dir = Path(active_entry(cold.status())["dir"])
    (cold_dir / "inductor" / "kernel.so").write_bytes(b"compiled")
    assert cold.check()["warnings"] == []  # ...nor does a warm one...
    shutil.rmtree(cold_dir / "inductor")
    report = cold.check()  # ...one that lost its files went cold: the seed's failure.
    assert report["clean"] is True, "warnings are not drift"
    (warning,) = report["warnings"]
    assert "went cold" in warning and str(cold_dir) in warning
    assert f"envlock cache {cold.profile} restore FILE" in warning

    # The warm root A has nothing to say, in a clean shell...
    root_a.apply()  # generation 1 active, whatever ran before
    assert root_a.check()["warnings"] == []
    # ...but a shell whose TORCHINDUCTOR_CACHE_DIR points elsewhere would miss the cache.
    warm_dir = entry_for(root_a.status(), compiled["fingerprint"])["dir"]
    elsewhere = {**env, "TORCHINDUCTOR_CACHE_DIR": str(work / "elsewhere")}
    (warning,) = root_a.check(env=elsewhere)["warnings"]
    assert "TORCHINDUCTOR_CACHE_DIR" in warning
    assert str(work / "elsewhere") in warning
    assert os.path.join(warm_dir, "inductor") in warning
    # The same variable pointing at the build's own directory is fine.
    right = {**env, "TORCHINDUCTOR_CACHE_DIR": os.path.join(warm_dir, "inductor")}
    assert root_a.check(env=right)["warnings"] == []


# -- (c) an archive restored into a fresh root gives hits on its first run -------------------
def test_saved_cache_restored_on_a_fresh_root_hits_first_time(
    work: Path,
    env: dict[str, str],
    lock: Path,
    root_a: Project,
    script: Path,
    compiled: dict[str, Any],
) -> None:
    fresh = fresh_root(work, "b", env, lock, bytecode_of=root_a)
    status = fresh.status()
    assert active_entry(status)["id"] == compiled["fingerprint"], "same lock, same build"
    assert active_entry(status)["files"] == 0
    answer = json.loads(
        fresh.ok("cache", fresh.profile, "restore", compiled["archive"], "--json").stdout
    )
    conforms("cache-restore", answer)
    assert answer["fingerprint"] == compiled["fingerprint"]
    assert answer["restored"] == active_entry(compiled["after_first"])["files"] > 0
    assert answer["dir"] == str(fresh.root / "cache" / compiled["fingerprint"])
    result = fresh.compile(script)
    assert result["hit"] >= 1 and result["miss"] == 0, result.data
    assert result["inductor_dir"] == os.path.join(answer["dir"], "inductor")


# -- (h) torch's mega-cache, saved by a script and loaded by `run --compile-artifacts` -------
def test_mega_cache_loaded_on_a_fresh_root_hits_first_time(
    work: Path,
    env: dict[str, str],
    lock: Path,
    root_a: Project,
    script: Path,
    compiled: dict[str, Any],
) -> None:
    saved = compiled["first"]["saved"]
    assert saved["bytes"] > 0
    assert saved["fingerprint"]["torch"] == TORCH_CPU_VERSION
    header, data = envlock_megacache.read(str(compiled["artifacts"]))
    assert header["fingerprint"] == saved["fingerprint"] and len(data) == saved["bytes"]

    fresh = fresh_root(work, "c", env, lock, bytecode_of=root_a)
    assert active_entry(fresh.status())["files"] == 0
    result = fresh.compile(script, artifacts=compiled["artifacts"])
    assert f"envlock: loaded {saved['bytes']} bytes of compile artifacts" in result.stderr
    assert result["hit"] >= 1 and result["miss"] == 0, result.data
    # The loaded entries landed in the build's own directory (envlock run's variables).
    assert active_entry(fresh.status())["files"] > 0


def test_mega_cache_of_another_build_is_refused(
    work: Path, root_a: Project, compiled: dict[str, Any]
) -> None:
    header, data = envlock_megacache.read(str(compiled["artifacts"]))
    header["fingerprint"].update(torch="2.13.0+cu128", cuda="12.8")
    other = work / "artifacts-cu128.bin"
    text = json.dumps(header).encode()
    other.write_bytes(envlock_megacache.MAGIC + struct.pack("<Q", len(text)) + text + data)

    garbage = work / "not-artifacts.bin"
    garbage.write_bytes(b"PK\x03\x04 something else")

    root_a.apply()  # generation 1: the CPU torch that compiled the real file
    probe = (
        "import envlock_megacache, sys\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        envlock_megacache.load(path)\n"
        "    except ValueError as exc:\n"
        "        print(exc)\n"
    )
    result = root_a.run("python", "-c", probe, other, garbage, artifacts=other)
    # At start-up (sitecustomize): refused, said on stderr, and the command still runs.
    assert "envlock: compile artifacts not loaded:" in result.stderr
    assert f"{other} was compiled for another build" in result.stderr
    assert "torch: file has 2.13.0+cu128, this process has 2.13.0+cpu" in result.stderr
    assert "cuda: file has 12.8, this process has None" in result.stderr
    assert "envlock: loaded" not in result.stderr
    # From the script itself: load() raises, with the same message, or says what's wrong.
    refusals = result.stdout.strip().splitlines()
    assert len(refusals) == 2, result.stdout
    assert refusals[0].startswith(f"{other} was compiled for another build: ")
    assert "torch: file has 2.13.0+cu128, this process has 2.13.0+cpu" in refusals[0]
    assert refusals[1] == f"{garbage}: not an envlock mega-cache file"


# -- (d) another torch build gets another directory ------------------------------------------
def test_another_torch_build_gets_another_dir(
    root_a: Project, fake_a: Project, compiled: dict[str, Any]
) -> None:
    fake_a.apply()
    status = fake_a.status()
    fake = active_entry(status)
    assert fake["id"] != compiled["fingerprint"]
    assert fake["id"].startswith("torch-2.11.0+cpu-")
    assert fake["files"] == 0 and Path(fake["dir"], "inductor").is_dir()
    assert status["active_parts"]["torch"] == "2.11.0+cpu"
    # The real build's warm directory is still there, kept, with its generation listed.
    real = entry_for(status, compiled["fingerprint"])
    assert not real["active"]
    assert real["files"] == active_entry(compiled["after_first"])["files"]
    assert real["generations"] == [compiled["before"]["current"]]
    assert fake["generations"] == [status["current"]] != real["generations"]
    # Both profiles share the root, so the real profile's status sees the same dirs.
    assert {d["id"] for d in root_a.status()["dirs"]} == {fake["id"], real["id"]}


# -- (f) an archive of another build is refused, naming the part; --force takes it ------------
def test_restore_of_another_build_is_refused_unless_forced(
    fake_a: Project, compiled: dict[str, Any]
) -> None:
    fake_a.apply()  # the fake-torch generation active
    result = fake_a.envlock("cache", fake_a.profile, "restore", compiled["archive"])
    assert result.returncode == 3, result.stdout + result.stderr
    message = " ".join((result.stdout + result.stderr).split())
    assert "belongs to another build" in message
    assert f"torch: archive has {TORCH_CPU_VERSION}, this build has 2.11.0+cpu" in message
    assert active_entry(fake_a.status())["files"] == 0, "nothing written when refused"

    forced = fake_a.ok("cache", fake_a.profile, "restore", compiled["archive"], "--force")
    assert "restored" in forced.stdout
    fake = active_entry(fake_a.status())
    assert fake["id"].startswith("torch-2.11.0+cpu-")
    assert fake["files"] == active_entry(compiled["after_first"])["files"]


# -- (e) rollback to the first generation brings its warm directory back ---------------------
def test_rollback_brings_back_the_old_dirs_hits(
    root_a: Project, fake_a: Project, script: Path, compiled: dict[str, Any]
) -> None:
    fake_a.apply()  # generation 2 (fake torch) active
    fake_id = active_entry(fake_a.status())["id"]
    root_a.ok("rollback", root_a.profile)
    status = root_a.status()
    assert status["current"] == compiled["before"]["current"]
    assert status["active"] == compiled["fingerprint"]
    result = root_a.compile(script)
    assert result["hit"] >= 1 and result["miss"] == 0, result.data
    assert result["inductor_dir"] == os.path.join(
        entry_for(status, compiled["fingerprint"])["dir"], "inductor"
    )
    # Neither rollback nor gc deletes a cache dir.
    root_a.ok("gc", "-y", "--keep", "0", root_a.profile)
    kept = root_a.status()
    assert fake_id in {d["id"] for d in kept["dirs"]}
    assert entry_for(kept, compiled["fingerprint"])["files"] > 0


def test_cache_status_text_and_usage(root_a: Project) -> None:
    shown = root_a.ok("cache", root_a.profile, "status")
    assert "compile caches under" in shown.stdout and "warm (" in shown.stdout
    missing = root_a.envlock("cache", root_a.profile, "save")
    assert missing.returncode == 2 and "needs a FILE" in missing.stderr


def test_cache_save_and_restore_refuse_what_they_should(root_a: Project, work: Path) -> None:
    archive = work / "refusals.tar.gz"
    root_a.ok("cache", root_a.profile, "save", archive)
    again = root_a.envlock("cache", root_a.profile, "save", archive)
    assert again.returncode == 2 and "exists" in again.stderr and "--force" in again.stderr
    root_a.ok("cache", root_a.profile, "save", "--force", archive)

    not_gzip = work / "not-gzip.tar.gz"
    not_gzip.write_bytes(b"this is not an archive\n" * 10)
    bad = root_a.envlock("cache", root_a.profile, "restore", not_gzip)
    assert bad.returncode == 3 and "not a readable envlock cache archive" in bad.stderr
    assert "Traceback" not in bad.stderr

    import io
    import tarfile

    for meta in (b"[1, 2]", b'{"fingerprint": "x"}', b"\xff\xfe"):
        odd = work / "odd-meta.tar.gz"
        with tarfile.open(odd, "w:gz") as tar:
            info = tarfile.TarInfo("envlock-cache.json")
            info.size = len(meta)
            tar.addfile(info, io.BytesIO(meta))
        result = root_a.envlock("cache", root_a.profile, "restore", odd)
        assert result.returncode == 3 and "not envlock's metadata" in result.stderr, meta
        assert "Traceback" not in result.stderr

    # A symlink planted inside the cache dir never carries a restore elsewhere.
    active = Path(active_entry(root_a.status())["dir"])
    outside = work / "outside"
    outside.mkdir(exist_ok=True)
    inductor = active / "inductor"
    moved = active / "inductor.moved"
    inductor.rename(moved)
    inductor.symlink_to(outside)
    try:
        result = root_a.envlock("cache", root_a.profile, "restore", archive)
        assert result.returncode == 3 and "outside the cache dir" in result.stderr
        assert list(outside.iterdir()) == []
    finally:
        inductor.unlink()
        moved.rename(inductor)
