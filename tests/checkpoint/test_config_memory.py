"""What `inspect` and `diff` hold does not grow with a config's objects (issue #40).

Each run is a fresh `envlock` process under an address-space limit (RLIMIT_AS) of
limits.MEMORY_BOUND: the largest config the per-command budget admits (1.2 M keys in a
torch.save file, 4.8 M of the 5 M pickle opcodes) is inspected and diffed, a pair of 600,000
keys differing in one value is diffed and the key named, and a pair past the budget is
refused (exit 3). Each ends with its answer, never a MemoryError. A config past 10,000 keys
is folded as it is read (checkpoint/fold.py) and the pickle read in chunks (pickled.py): a
diff's peak memory grows with neither (measured on 150,000 and 600,000 keys).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.base.limits import BUDGET, MEMORY_BOUND
from tests.checkpoint_factory import measure, run_torch

CONFIGS_JOB = r"""
import sys, torch
from pathlib import Path
out = Path(sys.argv[1])


def save(name, keys, changed=None):
    config = {f"param_{i}": f"value-{i}-xxxxxxxxxx" for i in range(keys)}
    if changed is not None:
        config[f"param_{changed}"] = "changed"
    torch.manual_seed(0)
    torch.save({"model": torch.nn.Linear(4, 3).state_dict(), "config": config, "step": 1},
               out / name)


save("largest.pt", 1_200_000)
save("small.pt", 10)
save("a600.pt", 600_000)
save("b600.pt", 600_000, changed=17)
save("a150.pt", 150_000)
save("b150.pt", 150_000, changed=17)
"""


@pytest.fixture(scope="module")
def configs(torch_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("big-configs")
    run_torch(torch_python, CONFIGS_JOB, str(out))
    return out


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BOUND, MEMORY_BOUND))


def envlock(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`envlock ARGS` as a fresh process whose address space is limited to MEMORY_BOUND."""
    argv = [sys.executable, "-m", "envlock", *map(str, args)]
    proc = subprocess.run(argv, capture_output=True, text=True, preexec_fn=_limited)
    assert "MemoryError" not in proc.stderr and "out of memory" not in proc.stderr, proc.stderr
    return proc


def test_the_largest_config_the_budget_admits_is_inspected_within_the_bound(
    configs: Path,
) -> None:
    proc = envlock("inspect", "--json", configs / "largest.pt")
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout)["config"]["config"]
    assert config.startswith("<cut: dict of 1,200,000 items; sha256:")


def test_the_largest_config_the_budget_admits_is_diffed_within_the_bound(configs: Path) -> None:
    proc = envlock("diff", "--json", configs / "largest.pt", configs / "small.pt")
    assert proc.returncode == 1, proc.stderr
    (group,) = json.loads(proc.stdout)["groups"]
    changes = {c["key"]: c for c in group["changes"]}  # B's 10 keys, each added
    assert len(changes) == 11
    assert changes["checkpoint.config"]["a"].startswith("<cut: dict of 1,200,000 items; sha256:")


def test_two_600k_configs_differing_in_one_value(configs: Path) -> None:
    """Both sides together within the budget; the one value found by the digest of each."""
    proc = envlock("diff", "--json", configs / "a600.pt", configs / "b600.pt")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    (group,) = doc["groups"]
    assert [c["key"] for c in group["changes"]] == ["checkpoint.config"]
    assert doc["coverage"]["by_digest"] == ["checkpoint.config"]
    # Folded as it was read (fold.py), the value still says which key changed: read again.
    (change,) = group["changes"]
    assert change["paths"] == ["param_17"] and change["grown"] == 0
    human = envlock("diff", configs / "a600.pt", configs / "b600.pt")
    line = next(x for x in human.stdout.splitlines() if "checkpoint.config" in x)
    said = line.split("checkpoint.config", 1)[1].strip()
    assert said == "param_17: value-17-xxxxxxxxxx → changed"


def test_what_a_diff_holds_does_not_grow_with_the_config(configs: Path) -> None:
    """150,000 and 600,000 keys (8 and 33 MB files), one value changed: the bigger diff's
    peak memory exceeds the smaller's by less than 16 MiB — neither the objects the keys make
    (torch.load's way: 150 MB more) nor the pickle's bytes (read in chunks, pickled.py) are
    held; what grows is the scan's memo, a pointer per memoized object."""
    runs = {}
    for keys in (150, 600):
        argv = [sys.executable, "-m", "envlock", "diff", "--json"]
        runs[keys] = measure([*argv, str(configs / f"a{keys}.pt"), str(configs / f"b{keys}.pt")])
        assert runs[keys].returncode == 1, runs[keys].stderr
        (group,) = json.loads(runs[keys].stdout)["groups"]
        assert group["changes"][0]["paths"] == ["param_17"]
    grown = runs[600].peak_rss_bytes - runs[150].peak_rss_bytes
    pickle_grown = (configs / "a600.pt").stat().st_size - (configs / "a150.pt").stat().st_size
    assert grown < 16 * 2**20 < pickle_grown, (grown, pickle_grown)


def test_past_the_budget_is_refused_within_the_bound(configs: Path) -> None:
    """Two of the largest: the second side passes the command's budget of pickle opcodes
    and is refused before it is unpickled (exit 3), the first side held meanwhile."""
    proc = envlock("diff", configs / "largest.pt", configs / "largest.pt")
    assert proc.returncode == 3, proc.stderr
    assert f"budget of {BUDGET['pickle opcodes']:,} pickle opcodes" in proc.stderr
