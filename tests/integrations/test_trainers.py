"""The trainer callbacks (envlock/integrations) with the real libraries, on CPU (issue #45).

Each example of the site's "With your trainer" page (docs/trainers.md) is run as written,
under `envlock run` on a real generation (tests/integrations/conftest.py): a Hugging Face
`Trainer` training a tiny Llama for four steps and saving every two, a Lightning `Trainer`
with a tiny module and a `ModelCheckpoint`, and accelerate's `save_state`. Then the
checkpoints are read back: a snapshot beside every one, the run's real learning rate and
batch size in its config, the trainer's own numbers in its metrics, no secret of the
arguments or the environment anywhere in it.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from envlock.runs.snapshot_file import load_snapshot
from tests.conftest import run_envlock
from tests.integrations.conftest import SECRETS, TrainerProject
from tests.transcripts import code_blocks, commands_and_outputs, console_blocks

PAGE = Path(__file__).resolve().parents[2] / "docs" / "trainers.md"
HF_RUNS = (
    "$ envlock run train.toml -- python train_hf.py --out runs/a --lr 1e-3 --data data/small.jsonl"
)


def example(name: str) -> str:
    """The page's script whose first line is `# NAME`."""
    found = [
        body for lang, body in code_blocks(PAGE) if lang == "python" and body[:1] == [f"# {name}"]
    ]
    assert len(found) == 1, f"{PAGE} lost its {name}"
    return "\n".join(found[0]) + "\n"


def written(project: TrainerProject, name: str) -> Path:
    script = project.dir / name
    script.write_text(example(name))
    return script


def secrets_in(path: Path) -> list[str]:
    text = path.read_text()
    return [name for name, value in SECRETS.items() if value in text]


def numbers(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if isinstance(v, (int, float))}


# -- Hugging Face ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_runs(trainer_project: TrainerProject) -> dict[str, Any]:
    """The page's two Trainer runs and its diff of their last checkpoints, run as shown."""
    written(trainer_project, "train_hf.py")
    trainer_project.write_data("small.jsonl", 16)
    trainer_project.write_data("large.jsonl", 32)
    (block,) = [b for b in console_blocks(PAGE) if b[0] == HF_RUNS]
    steps = commands_and_outputs(block)
    results = []
    for command, _ in steps:
        argv = shlex.split(command)
        assert argv[0] == "envlock"
        results.append(run_envlock(*argv[1:], cwd=trainer_project.dir, env=trainer_project.env))
    for result in results[:-1]:
        assert result.returncode == 0, result.stdout + result.stderr
    return {"steps": steps, "diff": results[-1]}


def test_every_checkpoint_of_a_trainer_run_has_its_snapshot(
    trainer_project: TrainerProject, hf_runs: dict[str, Any]
) -> None:
    runs = trainer_project.dir / "runs" / "a"
    assert sorted(p.name for p in runs.iterdir()) == ["checkpoint-2", "checkpoint-4"]
    for step in (2, 4):
        checkpoint = runs / f"checkpoint-{step}"
        snapshot = load_snapshot(checkpoint)
        assert snapshot["verified"] is True
        config = snapshot["config"]
        args = config["training_args"]
        assert args["learning_rate"] == 1e-3 and args["per_device_train_batch_size"] == 4
        assert config["run_paths"] == {"output_dir": "runs/a"} and "output_dir" not in args
        assert config["model"]["hidden_size"] == 16 and config["model"]["num_hidden_layers"] == 2
        assert config["train_dataset"] == {"samples": 16}
        # The trainer's numbers: its log history as trainer_state.json keeps it.
        state = json.loads((checkpoint / "trainer_state.json").read_text())
        logged = numbers(state["log_history"][-1])
        metrics = snapshot["metrics"]
        assert {k: metrics[k] for k in logged} == logged and metrics["step"] == step
        assert {"loss", "learning_rate", "grad_norm", "epoch"} <= set(logged)
        # The profile's [data] and the run's own training set, both fingerprinted.
        assert snapshot["datasets"]["corpus"]["files"] == 1
        assert (
            snapshot["datasets"]["train"]["bytes"]
            == (trainer_project.dir / "data" / "small.jsonl").stat().st_size
        )
        assert secrets_in(checkpoint / "envlock-snapshot.json") == []
    # The hub token the script passed to TrainingArguments is recorded hidden.
    assert "hf_" not in str(
        load_snapshot(runs / "checkpoint-4")["config"]["training_args"]["hub_token"]
    )
    # The speeds the trainer reports once training ended, in the last checkpoint's snapshot.
    final = load_snapshot(runs / "checkpoint-4")["metrics"]
    assert final["train_samples_per_second"] > 0 and final["train_steps_per_second"] > 0
    assert "train_samples_per_second" not in load_snapshot(runs / "checkpoint-2")["metrics"]


def groups_of(lines: list[str]) -> dict[str, list[str]]:
    """A diff's text by group: {title: its lines} (the title is the line before each block)."""
    groups: dict[str, list[str]] = {}
    for paragraph in "\n".join(lines).split("\n\n"):
        head, *rest = paragraph.splitlines()
        groups[re.sub(r" \(.*", "", head)] = [re.sub(r" +", " ", line) for line in rest]
    return groups


def test_diff_of_two_trainer_runs_shows_learning_rate_and_dataset(
    trainer_project: TrainerProject, hf_runs: dict[str, Any]
) -> None:
    """The page's transcript: every line as shown, but the measured values (a run's speed is
    its own): for those, the names."""
    diff = hf_runs["diff"]
    assert diff.returncode == 1, diff.stderr
    expected = groups_of(hf_runs["steps"][-1][1])
    actual = groups_of(diff.stdout.strip().splitlines())
    measured = "metrics"
    assert [k.split(" ")[0] for k in actual.pop(measured)] == [
        k.split(" ")[0] for k in expected.pop(measured)
    ]
    assert actual == expected
    hyper = "\n".join(actual["hyperparameters"])
    assert "run.training_args.learning_rate 0.001 → 0.002" in hyper
    assert "run.train_dataset.samples 16 → 32" in hyper
    assert any(line.startswith("train ") for line in actual["data"])


def test_diff_of_two_trainer_output_directories_reads_the_chosen_checkpoints_snapshot(
    trainer_project: TrainerProject, hf_runs: dict[str, Any]
) -> None:
    """`envlock diff runs/a runs/b`: each side's newest checkpoint is chosen, and the snapshot
    the callback wrote inside it is read (the environment and the run's config compared),
    not only the checkpoint's own files."""
    diff = run_envlock("diff", "--json", "runs/a", "runs/b", cwd=trainer_project.dir)
    assert diff.returncode == 1, diff.stderr
    doc = json.loads(diff.stdout)
    keys = {c["key"] for g in doc["groups"] for c in g["changes"]}
    assert "run.training_args.learning_rate" in keys
    assert "run.train_dataset.samples" in keys


def test_a_trainer_run_outside_envlock_run_says_it_was_not_verified(
    trainer_project: TrainerProject, hf_runs: dict[str, Any]
) -> None:
    env = {k: v for k, v in trainer_project.env.items() if k != "PYTHONPATH"}
    argv = [
        str(trainer_project.python),
        "train_hf.py",
        "--out",
        "runs/c",
        "--data",
        "data/small.jsonl",
    ]
    alone = subprocess.run(argv, cwd=trainer_project.dir, env=env, capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr
    assert "was not verified against its lock" in alone.stderr
    for step in (2, 4):
        snapshot = load_snapshot(trainer_project.dir / "runs" / "c" / f"checkpoint-{step}")
        assert snapshot["verified"] is False and snapshot["profile"]["name"] == "train"
        assert snapshot["config"]["training_args"]["learning_rate"] == 1e-3
        assert snapshot["metrics"]["step"] == step


# -- Lightning -----------------------------------------------------------------------------
CURRENT_SCORE = """
import json, sys, torch
state = torch.load(sys.argv[1], weights_only=False)
saved = [v for k, v in state["callbacks"].items() if k.startswith("ModelCheckpoint")]
print(json.dumps({"global_step": state["global_step"], "hparams": dict(state["hyper_parameters"])}))
"""


def test_lightning_writes_the_snapshot_beside_its_checkpoints(
    trainer_project: TrainerProject,
) -> None:
    script = written(trainer_project, "train_lightning.py")
    trainer_project.run("python", script, "--out", "ckpt-lightning", "--lr", "0.05")
    out = trainer_project.dir / "ckpt-lightning"
    assert sorted(p.name for p in out.iterdir()) == [
        "envlock-snapshot.json",
        "epoch=0-step=2.ckpt",
        "epoch=0-step=4.ckpt",
    ]
    snapshot = load_snapshot(out)
    assert snapshot["verified"] is True
    assert snapshot["config"]["hparams"] == {"lr": 0.05, "batch_size": 8}
    assert snapshot["config"]["trainer"]["max_steps"] == 4
    assert snapshot["config"]["run_paths"] == {"checkpoint_dirs": [str(out)]}
    metrics = snapshot["metrics"]
    assert metrics["step"] == 4 and metrics["epoch"] == 0 and metrics["train_loss"] > 0
    # What the checkpoint itself says of its step and hparams, read by the generation's torch.
    read = subprocess.run(
        [str(trainer_project.python), "-c", CURRENT_SCORE, str(out / "epoch=0-step=4.ckpt")],
        env=trainer_project.env,
        capture_output=True,
        text=True,
    )
    assert read.returncode == 0, read.stderr
    saved = json.loads(read.stdout)
    assert (
        saved["global_step"] == metrics["step"]
        and saved["hparams"] == snapshot["config"]["hparams"]
    )
    assert snapshot["datasets"]["corpus"]["files"] == 1
    assert secrets_in(out / "envlock-snapshot.json") == []


# -- accelerate ----------------------------------------------------------------------------
def test_accelerate_save_state_writes_the_snapshot_into_its_directory(
    trainer_project: TrainerProject,
) -> None:
    script = written(trainer_project, "train_accelerate.py")
    trainer_project.run("python", script, "--out", "ckpt-accelerate", "--lr", "0.02")
    losses = []
    for step in (2, 4):
        saved = trainer_project.dir / "ckpt-accelerate" / f"step-{step}"
        assert "model.safetensors" in {p.name for p in saved.iterdir()}
        snapshot = load_snapshot(saved)
        assert snapshot["verified"] is True
        assert snapshot["config"]["run"] == {"lr": 0.02, "batch_size": 8}
        assert snapshot["config"]["accelerator"]["num_processes"] == 1
        assert snapshot["metrics"]["step"] == step and snapshot["metrics"]["loss"] > 0
        losses.append(snapshot["metrics"]["loss"])
        assert snapshot["datasets"]["corpus"]["files"] == 1
        assert secrets_in(saved / "envlock-snapshot.json") == []
    assert losses[0] != losses[1]  # each save's own number, not the first one again


# -- the API the generation carries ----------------------------------------------------------
TWICE = """
import pathlib, sys, envlock
corpus, named, out = map(pathlib.Path, sys.argv[1:])
envlock.snapshot(out / "first", data={"named": named})
(corpus / "part-1.txt").write_text("written during the run")  # the run's own output, say
named.write_text("changed")
envlock.snapshot(out / "second", data={"named": named})
"""


def test_the_profiles_datasets_are_fingerprinted_once_per_run(
    trainer_project: TrainerProject, tmp_path: Path
) -> None:
    """A callback snapshots at every save: the profile's [data] is walked once per run and
    recorded in each; a dataset the call names is fingerprinted at each call."""
    corpus = trainer_project.dir / "corpus"
    named = tmp_path / "named.txt"
    named.write_text("x")
    try:
        trainer_project.run("python", "-c", TWICE, corpus, named, tmp_path)
    finally:
        (corpus / "part-1.txt").unlink(missing_ok=True)
    first, second = (load_snapshot(tmp_path / n)["datasets"] for n in ("first", "second"))
    assert first["corpus"] == second["corpus"] and first["corpus"]["files"] == 1
    assert first["named"] != second["named"]


IMPORTS = """
import json, sys
import envlock.integrations.transformers, envlock.integrations.lightning
import envlock.integrations.accelerate
print(json.dumps({"loaded": sorted(sys.modules), "api": envlock.__file__,
                  "integrations": envlock.integrations.__file__}))
"""


def test_importing_the_integrations_imports_no_framework(trainer_project: TrainerProject) -> None:
    """In the generation's python, where all of them are installed: the callbacks' modules
    load none (nor torch) until a class is named."""
    result = trainer_project.run("python", "-c", IMPORTS)
    seen = json.loads(result.stdout)
    frameworks = ("torch", "transformers", "lightning", "pytorch_lightning", "accelerate")
    assert [m for m in seen["loaded"] if m.split(".")[0] in frameworks] == []
    # The API envlock run gives the command, and the folder it shipped beside it.
    assert seen["api"].endswith("envlock_api/envlock/__init__.py")
    assert seen["integrations"].endswith("integrations/__init__.py")


CALLBACK_TRACKERS = """\
import json, os, sys
store, out = sys.argv[1:]
from envlock.integrations import record
import mlflow

mlflow.set_tracking_uri("file:" + store)
with mlflow.start_run() as run:
    written = record(os.path.join(out, "checkpoint-7"), config={"lr": 0.5}, trackers=("mlflow",))
client = mlflow.MlflowClient()
print(json.dumps({
    "written": written, "params": client.get_run(run.info.run_id).data.params,
    "tags": client.get_run(run.info.run_id).data.tags,
    "listed": [a.path for a in client.list_artifacts(run.info.run_id, "envlock")],
}))
"""


def test_a_callbacks_trackers_hand_each_snapshot_it_writes_to_the_tracker(
    trainer_project: TrainerProject, tmp_path: Path
) -> None:
    """What every callback does after a save with `trackers=("mlflow",)`: the snapshot it
    wrote is an artifact of the active MLflow run, its config the run's params, its facts
    the run's tags (the generation's `envlock`, under `envlock run`)."""
    result = trainer_project.run("python", "-c", CALLBACK_TRACKERS, tmp_path / "mlruns", tmp_path)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["written"] == str(tmp_path / "checkpoint-7" / "envlock-snapshot.json")
    assert found["params"]["lr"] == "0.5"
    assert found["tags"]["envlock.verified"] == "True"
    assert found["listed"] == ["envlock/checkpoint-7"]
