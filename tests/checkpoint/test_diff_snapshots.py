"""Snapshots next to checkpoints, diffs between runs, and rebuilding from a snapshot."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

import envlock as envlock_api
from envlock.runs.diff import Side, compare
from envlock.runs.diff_types import SnapshotRecord
from tests.conftest import Envlock
from tests.projects import write_seed_project


def applied_project(base: Path, wheelhouse: Path, envlock_cli: Envlock, **kwargs: object) -> Path:
    profile = write_seed_project(base, wheelhouse, **kwargs)  # type: ignore[arg-type]
    assert envlock_cli("lock", profile).returncode == 0
    result = envlock_cli("apply", "-y", profile)
    assert result.returncode == 0, result.stderr
    return profile


def groups_of(result: subprocess.CompletedProcess[str]) -> dict[str, set[str]]:
    data = json.loads(result.stdout)
    return {g["name"]: {c["key"] for c in g["changes"]} for g in data["groups"]}


@pytest.fixture
def two_runs(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> tuple[Path, Path]:
    """Run A: cu128, tinydep 1.0, script v1, lr 3e-4. Run B: cu130, tinydep 0.9, script v2,
    lr 1e-3 — snapshots written through the Python API, as a training script would."""
    a = applied_project(tmp_path / "a", wheelhouse, envlock, scripts={"train.py": "print('v1')\n"})
    b = applied_project(
        tmp_path / "b",
        wheelhouse,
        envlock,
        backend="cu130",
        packages=("trainutil", "tinydep==0.9"),
        scripts={"train.py": "print('v2')\n"},
    )
    envlock_api.snapshot(
        tmp_path / "ckpt-a",
        profile=a,
        config={"lr": 3e-4, "batch_size": 64, "model": {"layers": 12}},
    )
    envlock_api.snapshot(
        tmp_path / "ckpt-b",
        profile=b,
        config={"lr": 1e-3, "batch_size": 64, "model": {"layers": 12}},
    )
    return tmp_path / "ckpt-a", tmp_path / "ckpt-b"


def test_diff_names_exactly_what_changed(two_runs: tuple[Path, Path], envlock: Envlock) -> None:
    ckpt_a, ckpt_b = two_runs
    result = envlock("diff", "--json", ckpt_a, ckpt_b)
    assert result.returncode == 1
    groups = groups_of(result)
    assert list(groups) == ["torch build", "packages", "scripts", "hyperparameters"]
    assert {"torch", "local label", "CUDA", "CUDA libraries"} <= groups["torch build"]
    assert groups["packages"] == {"tinydep"}
    assert groups["scripts"] == {"train.py"}
    assert groups["hyperparameters"] == {"run.lr"}
    data = json.loads(result.stdout)
    torch = next(g for g in data["groups"] if g["name"] == "torch build")["changes"][0]
    assert (torch["a"], torch["b"]) == ("2.11.0+cu128", "2.11.0+cu130")

    human = envlock("diff", ckpt_a, ckpt_b).stdout
    assert human.index("torch build") < human.index("packages") < human.index("hyperparameters")
    assert "2.11.0+cu128 → 2.11.0+cu130" in human
    assert "0.0003 → 0.001" in human


def test_identical_sides_print_one_line(two_runs: tuple[Path, Path], envlock: Envlock) -> None:
    ckpt_a, _ = two_runs
    result = envlock("diff", ckpt_a, ckpt_a / "envlock-snapshot.json")
    assert result.returncode == 0
    assert len(result.stdout.strip().splitlines()) == 1
    assert ": identical in environment" in result.stdout


def test_diff_against_a_lock(two_runs: tuple[Path, Path], envlock: Envlock) -> None:
    ckpt_a, _ = two_runs
    lock = ckpt_a.parent / "a" / "pylock.seed.toml"
    same = envlock("diff", lock, ckpt_a)
    assert same.returncode == 0, same.stdout
    other = ckpt_a.parent / "b" / "pylock.seed.toml"
    groups = groups_of(envlock("diff", "--json", lock, other))
    assert groups["packages"] == {"tinydep"} and "torch" in groups["torch build"]


def test_snapshot_contents(two_runs: tuple[Path, Path]) -> None:
    ckpt_a, _ = two_runs
    data = json.loads((ckpt_a / "envlock-snapshot.json").read_text())
    assert data["schema"] == 1
    assert data["torch"]["version"] == "2.11.0+cu128" and data["torch"]["cuda"] == "12.8"
    assert data["packages"]["tinydep"] == "1.0"
    assert data["lock"]["text"].startswith("lock-version")
    assert data["generation"].startswith("1-")
    assert set(data["scripts"]["sha256"]) == {"train.py"}
    assert data["config"] == {"lr": 3e-4, "batch_size": 64, "model": {"layers": 12}}
    assert data["cache"]["fingerprint"]["parts"]["torch"] == "2.11.0+cu128"
    assert data["host"]["hostname"] and data["python"].startswith("3.11.")
    assert data["platform"]["machine"]


def test_run_writes_a_snapshot_before_the_command(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied_project(tmp_path / "p", wheelhouse, envlock, env={"NCCL_P2P_LEVEL": "NVL"})
    ckpt = tmp_path / "ckpt"
    check = f"import os; print(os.path.exists({str(ckpt / 'envlock-snapshot.json')!r}))"
    ran = envlock("run", profile, "--snapshot-into", ckpt, "--", "python", "-c", check)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "True"
    data = json.loads((ckpt / "envlock-snapshot.json").read_text())
    assert data["command"] == ["python", "-c", check]
    assert data["env"]["NCCL_P2P_LEVEL"] == "NVL"
    assert data["env"]["TORCHINDUCTOR_CACHE_DIR"].endswith("/inductor")


def test_snapshot_cli_with_a_config_file(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied_project(tmp_path / "p", wheelhouse, envlock)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"lr": 0.1}))
    result = envlock("snapshot", "--json", "--config", config, profile, tmp_path / "ckpt")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "ckpt" / "envlock-snapshot.json").read_text())["config"] == {
        "lr": 0.1
    }
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    refused = envlock("snapshot", "--config", bad, profile, tmp_path / "ckpt2")
    assert refused.returncode == 2 and "not valid JSON" in refused.stderr
    assert not (tmp_path / "ckpt2").exists()


def test_compile_cache_warm_to_cold(tmp_path: Path, wheelhouse: Path, envlock: Envlock) -> None:
    profile = applied_project(tmp_path / "p", wheelhouse, envlock)
    cache_dirs = list((tmp_path / "p" / "root" / "cache").iterdir())
    assert len(cache_dirs) == 1
    (cache_dirs[0] / "inductor" / "kernel.bin").write_bytes(b"\0" * 3_000_000)
    assert envlock("snapshot", profile, tmp_path / "warm").returncode == 0
    (cache_dirs[0] / "inductor" / "kernel.bin").unlink()
    assert envlock("snapshot", profile, tmp_path / "cold").returncode == 0
    result = envlock("diff", "--json", tmp_path / "warm", tmp_path / "cold")
    assert groups_of(result) == {"compile cache": {"compile cache"}}
    human = envlock("diff", tmp_path / "warm", tmp_path / "cold").stdout
    assert "warm (3.0 MB) → cold" in human


def test_checkpoint_dir_config_is_part_of_the_diff(
    two_runs: tuple[Path, Path], torch_python: Path, envlock: Envlock
) -> None:
    """A checkpoint's own args (argparse.Namespace) are read without torch or pickle code."""
    ckpt_a, ckpt_b = two_runs
    for ckpt, lr in ((ckpt_a, 3e-4), (ckpt_b, 1e-3)):
        code = (
            "import argparse, torch, sys; "
            f"args = argparse.Namespace(lr={lr}, warmup=100); "
            "torch.save({'model_state_dict': {'w': torch.zeros(2, 2)}, 'args': args, "
            "'step': 10}, sys.argv[1])"
        )
        subprocess.run([str(torch_python), "-c", code, str(ckpt / "step10.pt")], check=True)
    result = envlock("diff", "--json", ckpt_a, ckpt_b)
    groups = groups_of(result)
    # One setting recorded twice by the run (snapshot config and checkpoint args): one change,
    # its other source named (issue #26: two changes were reported as four).
    assert groups["hyperparameters"] == {"run.lr"}
    hyper = next(g for g in json.loads(result.stdout)["groups"] if g["name"] == "hyperparameters")
    assert hyper["changes"][0]["also"] == ["checkpoint.args.lr"]
    # The checkpoint files themselves compare too (with the snapshot beside each).
    files = groups_of(envlock("diff", "--json", ckpt_a / "step10.pt", ckpt_b / "step10.pt"))
    assert files["hyperparameters"] == {"run.lr"}


def test_apply_from_snapshot_rebuilds_that_environment(
    two_runs: tuple[Path, Path], envlock: Envlock
) -> None:
    ckpt_a, _ = two_runs
    profile_b = ckpt_a.parent / "b" / "seed.toml"
    # Rebuild run A's environment on B's target.
    result = envlock("apply", "-y", "--from-snapshot", ckpt_a, profile_b)
    assert result.returncode == 0, result.stderr
    assert "differ from the snapshot's pinned hashes" in result.stderr  # B's script is v2
    probe = "import torch, tinydep; print(torch.__version__, tinydep.VERSION)"
    ran = envlock("run", "--allow-drift", profile_b, "--", "python", "-c", probe)
    assert ran.stdout.strip() == "2.11.0+cu128 1.0"
    rebuilt = ckpt_a.parent / "rebuilt"
    assert envlock("snapshot", profile_b, rebuilt).returncode == 0
    groups = groups_of(envlock("diff", "--json", ckpt_a, rebuilt))
    assert "torch build" not in groups and "packages" not in groups


def test_from_snapshot_refuses_another_platform(
    two_runs: tuple[Path, Path], envlock: Envlock
) -> None:
    ckpt_a, _ = two_runs
    data = json.loads((ckpt_a / "envlock-snapshot.json").read_text())
    data["platform"]["machine"] = "riscv64"
    (ckpt_a / "envlock-snapshot.json").write_text(json.dumps(data))
    profile_b = ckpt_a.parent / "b" / "seed.toml"
    result = envlock("apply", "-y", "--from-snapshot", ckpt_a, profile_b)
    assert result.returncode == 2
    assert "the snapshot was taken on riscv64" in result.stderr


def test_bad_diff_sides(tmp_path: Path, envlock: Envlock) -> None:
    (tmp_path / "empty").mkdir()
    result = envlock("diff", tmp_path / "empty", tmp_path / "nope")
    assert result.returncode == 2 and "neither envlock-snapshot.json nor a checkpoint" in (
        result.stderr
    )
    (tmp_path / "broken.json").write_text("{")
    broken = envlock("diff", tmp_path / "broken.json", tmp_path / "broken.json")
    assert broken.returncode == 2 and "not a valid snapshot" in broken.stderr


# -- secrets (issue #11) ------------------------------------------------------------------
SECRETS = {
    "HF_TOKEN": "hf_live_token_value_0001",
    "HF_HUB_TOKEN": "hf_hub_token_value_0002",
    "NVIDIA_API_KEY": "nvapi-key-value-0003",
    "TORCH_HUB_TOKEN": "torch-hub-token-value-0004",
    "TRITON_API_KEY": "triton-api-key-value-0005",
}


def redacted(value: str) -> str:
    return f"<redacted sha256:{hashlib.sha256(value.encode()).hexdigest()[:8]}>"


def with_secrets(values: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **values}


def assert_no_secret(text: str, values: dict[str, str] | None = None) -> None:
    for name, value in (values or SECRETS).items():
        assert value not in text, f"the value of {name} leaked"


def test_snapshot_never_records_a_secret(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied_project(tmp_path / "p", wheelhouse, envlock, env={"WANDB_API_KEY": "wb-0006"})
    result = envlock("snapshot", profile, tmp_path / "ckpt", env=with_secrets(SECRETS))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "ckpt" / "envlock-snapshot.json").read_text()
    assert_no_secret(text + result.stdout + result.stderr, {**SECRETS, "WANDB": "wb-0006"})
    env = json.loads(text)["env"]
    assert {name: env[name] for name in SECRETS} == {k: redacted(v) for k, v in SECRETS.items()}
    assert env["WANDB_API_KEY"] == redacted("wb-0006")


def test_run_snapshot_redacts_but_the_command_sees_the_secret(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied_project(tmp_path / "p", wheelhouse, envlock)
    ckpt = tmp_path / "ckpt"
    code = "import os, sys; print(os.environ['HF_TOKEN'] == sys.argv[2])"
    argv = ["python", "-c", code, "--hf-token", SECRETS["HF_TOKEN"]]
    ran = envlock("run", profile, "--snapshot-into", ckpt, "--", *argv, env=with_secrets(SECRETS))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "True"
    text = (ckpt / "envlock-snapshot.json").read_text()
    assert_no_secret(text + ran.stderr)
    data = json.loads(text)
    assert data["command"] == [*argv[:-1], redacted(SECRETS["HF_TOKEN"])]
    assert data["env"]["TRITON_API_KEY"] == redacted(SECRETS["TRITON_API_KEY"])


def test_diff_says_a_secret_changed_without_printing_it(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    profile = applied_project(tmp_path / "p", wheelhouse, envlock)
    other = {**SECRETS, "HF_TOKEN": "hf_live_token_value_9999"}
    for name, values in (("a", SECRETS), ("b", other)):
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps({"lr": 0.1, "wandb": {"api_key": values["HF_TOKEN"]}}))
        made = envlock(
            "snapshot", "--config", config, profile, tmp_path / name, env=with_secrets(values)
        )
        assert made.returncode == 0, made.stderr
    human = envlock("diff", tmp_path / "a", tmp_path / "b")
    as_json = envlock("diff", "--json", tmp_path / "a", tmp_path / "b")
    assert human.returncode == as_json.returncode == 1
    for output in (human, as_json):
        assert_no_secret(output.stdout + output.stderr, {**SECRETS, "new": other["HF_TOKEN"]})
    groups = groups_of(as_json)
    assert groups["environment variables"] == {"HF_TOKEN"}
    assert groups["hyperparameters"] == {"run.wandb.api_key"}
    assert f"{redacted(SECRETS['HF_TOKEN'])} → {redacted(other['HF_TOKEN'])}" in human.stdout


def test_diff_redacts_old_snapshots_holding_raw_secrets(
    two_runs: tuple[Path, Path], envlock: Envlock
) -> None:
    """Snapshots written before redaction (or by hand) hold raw values: shown redacted."""
    ckpt_a, ckpt_b = two_runs
    for ckpt, token in ((ckpt_a, SECRETS["HF_TOKEN"]), (ckpt_b, "hf_other_raw_value")):
        path = ckpt / "envlock-snapshot.json"
        data = json.loads(path.read_text())
        data["env"]["HF_TOKEN"] = token
        data["command"] = ["python", "train.py", f"--api-key={token}"]
        data["config"]["hf_token"] = token
        path.write_text(json.dumps(data))
    for args in ((ckpt_a, ckpt_b), ("--json", ckpt_a, ckpt_b)):
        result = envlock("diff", *args)
        assert result.returncode == 1
        assert_no_secret(result.stdout + result.stderr, {**SECRETS, "b": "hf_other_raw_value"})
    groups = groups_of(envlock("diff", "--json", ckpt_a, ckpt_b))
    assert "HF_TOKEN" in groups["environment variables"]
    assert "run.hf_token" in groups["hyperparameters"]


# -- one-sided keys and the environment group (issue #20) ---------------------------------
def side(label: str, **fields: Any) -> Side:
    return Side(label, None, SnapshotRecord.of({"packages": {}, "env": {}, **fields}))


def changes(a: Side, b: Side) -> dict[str, dict[str, str]]:
    """{group: {key: kind}} of compare(a, b)."""
    return {g.name: {c.key: c.kind for c in g.changes} for g in compare(a, b)}


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (
            side("a", env={"NCCL_DEBUG": "INFO"}),
            side("b", env={"NCCL_DEBUG": "WARN"}),
            {"environment variables": {"NCCL_DEBUG": "changed"}},
        ),
        (
            side("a", env={"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0"}),
            side("b", env={"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "8"}),
            {"environment variables": {"NCCL_DEBUG": "removed", "OMP_NUM_THREADS": "added"}},
        ),
        (
            side("a", packages={"tinydep": "1.0"}),
            side("b", packages={"tinydep": "1.0", "trainutil": "2.0"}),
            {"packages": {"trainutil": "added"}},
        ),
        (
            side("a", packages={"tinydep": "1.0", "trainutil": "2.0"}),
            side("b", packages={"trainutil": "2.0"}),
            {"packages": {"tinydep": "removed"}},
        ),
        (
            side("a", config={"lr": 0.1, "warmup": 100}),
            side("b", config={"lr": 0.1, "schedule": "cosine"}),
            {"hyperparameters": {"run.warmup": "removed", "run.schedule": "added"}},
        ),
        (  # a key on one side only is a difference even when its value is null
            side("a", config={"lr": 0.1}, env={}),
            side("b", config={"lr": 0.1, "dropout": None}, env={"NCCL_ALGO": ""}),
            {
                "hyperparameters": {"run.dropout": "added"},
                "environment variables": {"NCCL_ALGO": "added"},
            },
        ),
        (
            side("a", config={"model": {"layers": 12}}),
            side("b", config={"model": {"layers": 12, "heads": 8}}),
            {"hyperparameters": {"run.model.heads": "added"}},
        ),
    ],
    ids=[
        "env-changed",
        "env-one-sided",
        "package-added",
        "package-removed",
        "config-one-sided",
        "null-one-sided",
        "nested-config-one-sided",
    ],
)
def test_compare_reports_changed_and_one_sided_keys(
    a: Side, b: Side, expected: dict[str, dict[str, str]]
) -> None:
    assert changes(a, b) == expected
    flipped = {"added": "removed", "removed": "added", "changed": "changed"}
    assert changes(b, a) == {
        group: {key: flipped[kind] for key, kind in keys.items()}
        for group, keys in expected.items()
    }


def test_diff_cli_shows_env_and_one_sided_keys(
    two_runs: tuple[Path, Path], envlock: Envlock
) -> None:
    """Through the CLI, with real snapshots: one env value changed, one env variable, one
    package and one hyperparameter on one side only; each is named with its side."""
    ckpt_a, _ = two_runs
    ckpt_b = ckpt_a.parent / "ckpt-a2"
    ckpt_b.mkdir()
    data = json.loads((ckpt_a / "envlock-snapshot.json").read_text())
    data["env"].update(NCCL_DEBUG="INFO", CUDA_VISIBLE_DEVICES="0,1")
    (ckpt_a / "envlock-snapshot.json").write_text(json.dumps(data))
    data["env"]["NCCL_DEBUG"] = "WARN"
    del data["env"]["CUDA_VISIBLE_DEVICES"]
    data["packages"]["extrapkg"] = "0.1"
    data["config"]["warmup"] = 100
    (ckpt_b / "envlock-snapshot.json").write_text(json.dumps(data))
    result = envlock("diff", "--json", ckpt_a, ckpt_b)
    assert result.returncode == 1
    kinds = {
        g["name"]: {c["key"]: c["kind"] for c in g["changes"]}
        for g in json.loads(result.stdout)["groups"]
    }
    assert kinds == {
        "packages": {"extrapkg": "added"},
        "hyperparameters": {"run.warmup": "added"},
        "environment variables": {"NCCL_DEBUG": "changed", "CUDA_VISIBLE_DEVICES": "removed"},
    }
    human = envlock("diff", ckpt_a, ckpt_b).stdout
    assert "INFO → WARN" in human
    assert "- 0,1 (only in A)" in human
    assert "+ 0.1 (only in B)" in human and "+ 100 (only in B)" in human


def test_diff_and_check_never_write_escapes_to_the_terminal(
    tmp_path: Path, wheelhouse: Path, envlock: Envlock
) -> None:
    """A hostile config value or file name is shown escaped, never run by the terminal."""
    profile = write_seed_project(tmp_path / "proj", wheelhouse)
    assert envlock("lock", profile).returncode == 0
    assert envlock("apply", "-y", profile).returncode == 0
    sides = []
    for name, value in (("a", "fine"), ("b", "\x1b[2Jcleared\x1b[2K")):
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps({"note": value}))
        out = tmp_path / name
        assert envlock("snapshot", "--config", config, profile, out).returncode == 0
        sides.append(out)
    shown = envlock("diff", *sides)
    assert shown.returncode == 1 and "\x1b" not in shown.stdout + shown.stderr
    assert "\\x1b[2J" in shown.stdout
    site = next((tmp_path / "proj" / "venv" / "lib").glob("python*/site-packages"))
    (site / "evil\x1b[2J.py").write_text("")
    check = envlock("check", profile)
    assert check.returncode == 1 and "\x1b" not in check.stdout + check.stderr
    assert "evil\\x1b[2J.py" in check.stdout
