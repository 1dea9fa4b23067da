"""`envlock bisect` end to end: real wheels, real generations, real runs of a command that is
really slower in BAD's environment, for each kind of cause.

One pair of runs serves every test (built once for the module): GOOD ran with slowpkg 1.0
(fast), pkga 1.0, pkgb 1.0, pkgc 1.0 with pkgd 1.0, OMP_NUM_THREADS=8 and a warm compile
cache; BAD with slowpkg 2.0 (its `work()` sleeps), pkga 1.1, pkgb 2.0 (which pulls in newdep),
pkgc 2.0 (which needs pkgd 2.0), pkgd 2.0, a new package `extra`, OMP_NUM_THREADS=4 and the
cache wiped (warmed again since, as `envlock cache restore` would). Seven differences: which one
makes the command slow is the command's choice (its MODE argument), so each test names the
cause it planted and checks that bisect finds exactly that one.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_envlock
from tests.json_shapes import conforms
from tests.projects import torch_profile_text
from tests.wheelhouse import build_wheel

GOOD_PACKAGES = ("slowpkg==1.0", "pkga==1.0", "pkgb==1.0", "pkgc==1.0", "pkgd==1.0")
BAD_PACKAGES = ("slowpkg==2.0", "pkga==1.1", "pkgb==2.0", "pkgc==2.0", "pkgd==2.0", "extra==1.0")

# The command measured: tokens per second over a fixed amount of work, slower when the MODE's
# cause is present. `noisy` adds seeded jitter (larger than half the gap) to slowpkg's cause.
SCRIPT = """\
import json, os, random, sys, time
from importlib.metadata import version
import slowpkg

mode = sys.argv[1]
cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")
cold = not any(files for _, _, files in os.walk(cache))
omp4 = os.environ.get("OMP_NUM_THREADS") == "4"
slow = {
    "env": omp4,
    "cache": cold,
    "pair": version("pkga") == "1.1" and omp4,
    "unit": version("pkgd") == "2.0",
}.get(mode, False)
started = time.perf_counter()  # the work alone is timed: the facts above are read first
if mode in ("slowpkg", "noisy", "status"):
    slowpkg.work()
if slow:
    time.sleep(0.1)
tok_s = 1000 / (0.05 + time.perf_counter() - started)
if mode == "noisy":
    counter = os.path.join(sys.argv[2], "count")
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(n + 1))
    tok_s += random.Random(n).uniform(-1.2, 1.2) * 17000
if mode == "status":
    sys.exit(1 if tok_s < 10000 else 0)
print("warming up")
print(json.dumps({"step": 1, "tok_s": tok_s}))
"""

SLOWPKG_2 = "import time\n\ndef work():\n    time.sleep(0.1)\n"


def build_wheels(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    build_wheel(dest, "slowpkg", "1.0", files={"slowpkg/__init__.py": "def work():\n    pass\n"})
    build_wheel(dest, "slowpkg", "2.0", files={"slowpkg/__init__.py": SLOWPKG_2})
    build_wheel(dest, "pkga", "1.0")
    build_wheel(dest, "pkga", "1.1")
    build_wheel(dest, "pkgb", "1.0")
    build_wheel(dest, "pkgb", "2.0", requires=["newdep>=1"])
    build_wheel(dest, "newdep", "1.0")
    build_wheel(dest, "pkgc", "1.0", requires=["pkgd<2"])
    build_wheel(dest, "pkgc", "2.0", requires=["pkgd>=2"])
    build_wheel(dest, "pkgd", "1.0")
    build_wheel(dest, "pkgd", "2.0")
    build_wheel(dest, "extra", "1.0")
    return dest


def write_profile(path: Path, links: tuple[str, ...], packages: tuple[str, ...], omp: str) -> None:
    path.write_text(
        torch_profile_text(
            "bisect",
            torch="2.11.0",
            backend="cu128",
            packages=packages,
            find_links=links,
            offline=True,
            extra=f'[env]\nOMP_NUM_THREADS = "{omp}"\n',
        )
    )


def ok(*args: str | Path) -> subprocess.CompletedProcess[str]:
    done = run_envlock(*args)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> dict[str, Path]:
    """GOOD and BAD snapshots of one profile, BAD's generation active, the cache warm."""
    base = tmp_path_factory.mktemp("bisect")
    links = (str(build_wheels(base / "wheels")), str(wheelhouse))
    profile = base / "proj" / "bisect.toml"
    profile.parent.mkdir()
    write_profile(profile, links, GOOD_PACKAGES, "8")
    ok("lock", profile)
    ok("apply", "-y", profile)
    cache = warm(profile)
    ok("snapshot", profile, base / "good")
    write_profile(profile, links, BAD_PACKAGES, "4")
    ok("lock", profile)
    ok("apply", "-y", profile)
    shutil.rmtree(cache)
    ok("snapshot", profile, base / "bad")
    warm(profile)
    (base / "probe.py").write_text(SCRIPT)
    return {"profile": profile, "good": base / "good", "bad": base / "bad", "base": base}


def warm(profile: Path) -> Path:
    """The active build's compile cache with a file in it (what a compile leaves)."""
    done = ok(
        "run",
        profile,
        "--",
        "python",
        "-c",
        "import os; print(os.environ['TORCHINDUCTOR_CACHE_DIR'])",
    )
    cache = Path(done.stdout.strip())
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "fxgraph.bin").write_bytes(b"compiled" * 100)
    return cache


def generations(profile: Path) -> dict[str, Any]:
    """The active generation, the hold, and every generation by name."""
    data = json.loads(ok("generations", "--json", profile).stdout)
    names = [g["name"] for g in data["generations"]]
    return {"active": data["generation"], "hold": data["hold"], "names": names}


def bisect(
    runs: dict[str, Path], mode: str, *extra: str, metric: bool = True
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    args = ["bisect", "--json", runs["profile"], runs["good"], runs["bad"], *extra]
    args += ["--metric", "tok_s"] if metric else []
    args += ["--", "python", str(runs["base"] / "probe.py"), mode, str(runs["base"])]
    done = run_envlock(*args)
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    conforms("bisect", data)
    return done, data


def labels(data: dict[str, Any]) -> dict[str, str]:
    return {d["key"]: d["label"] for d in data["differences"]}


def bound(data: dict[str, Any]) -> int:
    return 2 * math.ceil(math.log2(len(data["differences"]))) + 2


def test_bisect_names_slowpkg_alone_and_leaves_the_target_as_it_was(
    runs: dict[str, Path],
) -> None:
    before = generations(runs["profile"])
    done, data = bisect(runs, "slowpkg")
    assert done.returncode == 0, done.stderr
    assert data["status"] == "found"
    assert data["cause"] == ["packages:slowpkg"]
    # Seven differences, the unrelated moves among them; each measured, none guessed.
    kinds = sorted(d["kind"] for d in data["differences"])
    assert kinds == ["cache", "env", "packages", "packages", "packages", "packages", "packages"]
    assert 0 < data["builds"] <= bound(data)
    assert len(data["ends"]["good"]["values"]) >= 3 and len(data["ends"]["bad"]["values"]) >= 3
    assert data["ends"]["good"]["median"] > 2 * data["ends"]["bad"]["median"]
    alone = next(p for p in data["probes"] if p["changes"] == ["packages:slowpkg"])
    assert alone["outcome"] == "bad" and len(alone["values"]) >= 3
    # The active generation is BAD's again, and the probes built are gone.
    assert generations(runs["profile"]) == before
    assert data["generations_removed"]
    assert "slowpkg 1.0 → 2.0" in done.stderr  # the progress names the candidates


def test_the_answer_reads_as_a_cause_with_its_evidence(runs: dict[str, Path]) -> None:
    """The [env] variable is the cause, said for people (text, not --json)."""
    done = run_envlock(
        "bisect", runs["profile"], runs["good"], runs["bad"], "--metric", "tok_s", "--repeat", "2",
        "--", "python", str(runs["base"] / "probe.py"), "env", str(runs["base"]),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "the slowdown follows OMP_NUM_THREADS: 8 → 4" in out
    assert "with it alone: bad" in out and "GOOD with everything else of BAD: good" in out
    assert "not the cause:" in out and "slowpkg 1.0 → 2.0" in out
    assert "not tried:" not in out  # everything that differs was tried
    assert "probe 3 of at most 8 for a single cause" in done.stderr


@pytest.mark.parametrize(
    ("mode", "cause", "repeat"),
    [
        ("cache", ["cache"], "2"),
        # ddmin probes a pair many times (19 probes here): one run each keeps the file short
        ("pair", ["packages:pkga", "env:OMP_NUM_THREADS"], "1"),
    ],
)
def test_bisect_finds_each_kind_of_cause(
    runs: dict[str, Path], mode: str, cause: list[str], repeat: str
) -> None:
    done, data = bisect(runs, mode, "--repeat", repeat)
    assert done.returncode == 0, done.stderr
    assert data["status"] == "found"
    assert sorted(data["cause"]) == sorted(cause)


def test_a_package_that_needs_another_s_new_version_moves_with_it(runs: dict[str, Path]) -> None:
    done, data = bisect(runs, "unit", "--repeat", "1")  # what moves together is tested here
    assert done.returncode == 0, done.stderr
    unit = next(
        d for d in data["differences"] if {"pkgc", "pkgd"} <= {p["name"] for p in d["packages"]}
    )
    assert data["cause"] == [unit["key"]]
    assert any("moved as one unit" in note for note in data["notes"])
    # pkgb and the dependency it pulls in are one difference too.
    pkgb = next(d for d in data["differences"] if d["key"] == "packages:pkgb")
    assert {p["name"] for p in pkgb["packages"]} == {"pkgb", "newdep"}


def test_a_noisy_command_is_inconclusive_not_wrong(runs: dict[str, Path]) -> None:
    (runs["base"] / "count").unlink(missing_ok=True)
    done, data = bisect(runs, "noisy")
    assert done.returncode == 1
    assert data["status"] == "inconclusive"
    assert data["reason"]


def test_exit_status_mode_and_keep(runs: dict[str, Path]) -> None:
    before = set(generations(runs["profile"])["names"])
    done, data = bisect(runs, "status", "--keep", "--repeat", "1", metric=False)
    assert done.returncode == 0, done.stderr
    assert data["cause"] == ["packages:slowpkg"]
    kept = set(data["generations_kept"])
    after = set(generations(runs["profile"])["names"])
    assert kept and kept <= after and not kept & before


def test_an_interrupted_bisect_leaves_the_active_generation(runs: dict[str, Path]) -> None:
    before = generations(runs["profile"])
    args = [sys.executable, "-m", "envlock", "bisect", str(runs["profile"]), str(runs["good"])]
    args += [str(runs["bad"]), "--metric", "tok_s", "--"]
    args += ["python", str(runs["base"] / "probe.py"), "slowpkg", str(runs["base"])]
    with subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "probe 3 of" in line:  # the first probe after the ends: a probe generation
                break
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "active again" in err
    assert generations(runs["profile"]) == before
