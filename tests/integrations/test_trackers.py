"""A snapshot in MLflow and W&B (issue #45, tracker export), with the real libraries.

Two snapshots are written the way a training script writes them: `envlock.snapshot()` under
`envlock run`, with a secret in the config, on the command line and in the environment. The
trackers run in a venv of their own (mlflow-skinny, wandb; no envlock installed): MLflow with
a local file store, W&B offline (no login, no network), everything under tmp_path. What they
recorded is read back through each library's own API: MLflow's client (get_run,
list_artifacts, download_artifacts); W&B's offline run file (wandb 0.31 has no Python reader
of it, its reader is the Go core's `wandb sync`: the test reads its LevelDB-log framing and
parses each record with wandb's own protobuf `Record`). `envlock diff` then reads what each
tracker's download lays out.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlock.integrations import tracked
from tests.cli.test_snapshot_api import Project
from tests.conftest import run_envlock

CHECKOUT = Path(__file__).resolve().parents[2]
API = CHECKOUT / "envlock" / "startup" / "envlock_api"
PLANTED = "PLANTED"  # in every secret below; nowhere in what a tracker keeps
SECRET_ENV = {"HF_TOKEN": "hf_PLANTEDenv0003", "WANDB_API_KEY": "PLANTEDwandbkey00000000000000000"}

TRAIN = """\
import sys
import envlock

lr = float(sys.argv[2])
config = {
    "lr": lr,
    "api_key": "sk-PLANTEDcfg0001",
    "db": "postgresql://trainer:pwPLANTED0002@db.example/runs",
    "model": {"layers": 2, "heads": [4, 4]},
    "notes": "n" * 7000,
}
print(envlock.snapshot(sys.argv[1], config=config, data={"train": "data"}, metrics={"loss": 1.5}))
"""

MLFLOW = """\
import json, os, sys
checkout, store, out, *snapshots = sys.argv[1:]
import envlock
assert "envlock_api" in envlock.__file__, envlock.__file__  # the start-up set's stdlib copy
# envlock.integrations as the training environment reaches it: registered by that copy, with
# no envlock.base beside it
from envlock.integrations.mlflow import log_snapshot
import mlflow

mlflow.set_tracking_uri("file:" + store)
try:
    log_snapshot(snapshots[0])
    no_run = None
except RuntimeError as exc:
    no_run = str(exc)
with mlflow.start_run() as run:
    mlflow.log_param("lr", "3e-4")  # a trainer's own MLflow callback logged it first
    returned = [log_snapshot(path) for path in snapshots]
run_id = run.info.run_id
client = mlflow.MlflowClient()
data = client.get_run(run_id).data
listed = [a.path for a in client.list_artifacts(run_id, "envlock")]
whole = mlflow.artifacts.download_artifacts(run_id=run_id, dst_path=os.path.join(out, "whole"))
one = mlflow.artifacts.download_artifacts(
    run_id=run_id, artifact_path="envlock/checkpoint-2", dst_path=os.path.join(out, "one")
)
print(json.dumps({
    "no_run": no_run, "returned": returned, "tags": data.tags, "params": data.params,
    "listed": listed, "whole": whole, "one": one,
    "modules": sorted(m for m in sys.modules if m.startswith("envlock")),
}))
"""

WANDB = """\
import json, os, shutil, struct, sys, time
out, *snapshots = sys.argv[1:]
import wandb
from envlock.integrations.wandb import log_snapshot
from wandb.proto import wandb_internal_pb2

try:
    log_snapshot(snapshots[0])
    no_run = None
except RuntimeError as exc:
    no_run = str(exc)
run = wandb.init(project="envlock-test")
run.config.update({"lr": 3e-4})  # a trainer's own W&B callback logged it first
returned = [log_snapshot(path) for path in snapshots]
run_dir = os.path.dirname(run.dir)
run.finish()
wandb.teardown()  # the service ends: what it had to write is written


def records(path):
    # wandb's run file: a 7-byte W&B header, then LevelDB's log: 32 KiB blocks of chunks,
    # each crc32c(4) length(2) type(1): 1 whole, 2 first, 3 middle, 4 last.
    with open(path, "rb") as handle:
        data = handle.read()
    assert data[:4] == b":W&B", data[:7]
    pos, parts, found = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            found.append(wandb_internal_pb2.Record.FromString(parts))
    return found


run_file = next(n for n in os.listdir(run_dir) if n.endswith(".wandb"))
for _ in range(300):  # the run's last record is its exit
    found = records(os.path.join(run_dir, run_file))
    if any(r.WhichOneof("record_type") == "exit" for r in found):
        break
    time.sleep(0.1)
config, summary, artifacts = {}, {}, []
for record in found:
    kind = record.WhichOneof("record_type")
    if kind == "config":
        config.update((i.key, json.loads(i.value_json)) for i in record.config.update)
    elif kind == "summary":
        summary.update((i.key, json.loads(i.value_json)) for i in record.summary.update)
    elif kind == "artifact":
        artifact = record.artifact
        entries = {e.path: e.local_path for e in artifact.manifest.contents}
        artifacts.append({"name": artifact.name, "type": artifact.type,
                          "metadata": json.loads(artifact.metadata), "entries": entries})
# Where artifact.download() puts version N (wandb's own rule: Artifact._default_root).
from wandb import env
from wandb.sdk.artifacts._validators import validate_artifact_root_name
for version, artifact in enumerate(artifacts):
    root = os.path.join(env.get_artifact_dir(), validate_artifact_root_name(
        "{}:v{}".format(artifact["name"], version)))
    os.makedirs(root)
    for name, staged in artifact["entries"].items():
        shutil.copyfile(staged, os.path.join(root, name))
    artifact["downloaded"] = root
print(json.dumps({"no_run": no_run, "returned": returned, "config": config,
                  "summary": summary, "artifacts": artifacts}))
"""


class Runs:
    """Two checkpoints of one project's run, each with the snapshot the script wrote."""

    def __init__(self, work: Path) -> None:
        self.project = Project(work)
        self.dir = self.project.dir
        (self.dir / "data").mkdir()
        (self.dir / "data" / "part-0.txt").write_text("tokens\n")
        (self.dir / "train.py").write_text(TRAIN)
        env = dict(os.environ, **SECRET_ENV)
        for step, lr in ((2, "3e-4"), (4, "1e-3")):
            argv = ["python", "train.py", f"ckpt/checkpoint-{step}", lr]
            self.project.run(*argv, "--hf-token", "hf_PLANTEDargv0006", env=env)
        self.first = self.dir / "ckpt" / "checkpoint-2"
        self.second = self.dir / "ckpt" / "checkpoint-4"
        # A snapshot edited by hand (or by an older envlock): secrets in the clear.
        self.edited = self.dir / "ckpt" / "edited"
        self.edited.mkdir()
        doc = json.loads((self.first / tracked.SNAPSHOT_FILE).read_text())
        doc["env"]["HF_TOKEN"] = "hf_PLANTEDedit0004"
        doc["config"]["api_key"] = "sk-PLANTEDedit0005"
        (self.edited / tracked.SNAPSHOT_FILE).write_text(json.dumps(doc, indent=1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("trackers-runs"))


def tracker_env(work: Path, **extra: str) -> dict[str, str]:
    """The tracker process's environment: the run's secrets too, W&B offline and at home
    under `work` (its staging, cache and config directories included), MLflow's file store."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SECRET_ENV, **extra)
    for name in ("WANDB_DIR", "WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR"):
        (work / name.lower()).mkdir(parents=True, exist_ok=True)
        env[name] = str(work / name.lower())
    env.update(
        WANDB_MODE="offline",
        WANDB_SILENT="true",
        WANDB_ARTIFACT_DIR=str(work / "artifacts"),
        # MLflow 3.x refuses its file store unless told; its server-less client has no sqlite.
        MLFLOW_ALLOW_FILE_STORE="true",
        HOME=str(work / "home"),
    )
    (work / "home").mkdir(exist_ok=True)
    return env


def run_script(python: Path, script: str, args: list[Any], env: dict[str, str]) -> Any:
    """The script's JSON answer; it runs in HOME (`-c` puts its directory on sys.path: never
    the checkout, whose envlock would be found before the one the test chose)."""
    proc = subprocess.run(
        [str(python), "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=env["HOME"],
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def planted_in(directory: Path) -> list[str]:
    """The files under `directory` holding a planted secret's bytes."""
    return [
        str(p) for p in directory.rglob("*") if p.is_file() and PLANTED.encode() in p.read_bytes()
    ]


@pytest.fixture(scope="module")
def mlflow_run(
    runs: Runs, tracker_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("mlflow")
    env = tracker_env(work, PYTHONPATH=str(API))
    args = [CHECKOUT, work / "mlruns", work / "downloads", runs.first, runs.edited]
    found = run_script(tracker_python, MLFLOW, args, env)
    found["work"] = str(work)
    return found


@pytest.fixture(scope="module")
def wandb_run(
    runs: Runs, tracker_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("wandb")
    env = tracker_env(work, PYTHONPATH=str(CHECKOUT))
    args = [work, runs.first, runs.edited, runs.second]
    found = run_script(tracker_python, WANDB, args, env)
    found["work"] = str(work)
    return found


def snapshot_of(directory: Path) -> dict[str, Any]:
    return json.loads((directory / tracked.SNAPSHOT_FILE).read_text())


def test_mlflow_run_holds_the_snapshot_its_facts_and_the_hyperparameters(
    runs: Runs, mlflow_run: dict[str, Any]
) -> None:
    doc = snapshot_of(runs.first)
    tags = mlflow_run["tags"]
    assert tags["envlock.lock_sha256"] == doc["lock"]["sha256"]
    assert tags["envlock.torch"] == "2.11.0+cu128" == doc["torch"]["version"]
    assert tags["envlock.torch_cuda"] == "12.8"
    assert tags["envlock.generation"] == doc["generation"]
    assert tags["envlock.profile"] == "train" and tags["envlock.verified"] == "True"
    fingerprint = json.loads(tags["envlock.data.train"])
    assert fingerprint["listing_sha256"] == doc["datasets"]["train"]["listing_sha256"]
    assert fingerprint["files"] == 1 and "path" not in fingerprint
    params = mlflow_run["params"]
    assert params["lr"] == "3e-4"  # the callback's value stays (MLflow refuses a change)
    assert mlflow_run["returned"][0]["kept"] == ["lr"]
    assert params["model.layers"] == "2" and params["model.heads"] == "[4, 4]"
    assert params["api_key"].startswith("<redacted sha256:")
    assert params["db"].startswith("postgresql://trainer:<redacted-sha256:")
    # MLflow keeps 6000 characters of a param: the long one is cut, and says so.
    assert len(params["notes"]) == 6000 and params["notes"].endswith(tracked.CUT)
    assert "__class__" not in params
    assert sorted(mlflow_run["listed"]) == ["envlock/checkpoint-2", "envlock/edited"]


def test_mlflow_downloads_give_back_the_snapshot_file_whole(
    runs: Runs, mlflow_run: dict[str, Any]
) -> None:
    original = (runs.first / tracked.SNAPSHOT_FILE).read_bytes()
    one = Path(mlflow_run["one"])
    assert (one / tracked.SNAPSHOT_FILE).read_bytes() == original
    whole = Path(mlflow_run["whole"])
    assert (whole / "envlock" / "checkpoint-2" / tracked.SNAPSHOT_FILE).read_bytes() == original


def test_mlflow_ran_under_the_start_up_sets_envlock_with_no_tracker_imported_by_it(
    mlflow_run: dict[str, Any],
) -> None:
    """The training environment's `envlock` is the stdlib API copy: the integration still
    runs, its secret rule loaded from beside it (no envlock.base there)."""
    assert "envlock.base" not in mlflow_run["modules"]
    assert "envlock.integrations.tracked" in mlflow_run["modules"]
    assert "no active MLflow run" in mlflow_run["no_run"]


def test_no_secret_reaches_either_tracker(
    runs: Runs, mlflow_run: dict[str, Any], wandb_run: dict[str, Any]
) -> None:
    """Planted in the config, the command line and the environment of the run, and in the
    clear in a hand-edited snapshot: no tracker file holds one (the edited one is uploaded
    redacted)."""
    assert PLANTED.encode() not in (runs.first / tracked.SNAPSHOT_FILE).read_bytes()
    assert PLANTED.encode() in (runs.edited / tracked.SNAPSHOT_FILE).read_bytes()
    assert planted_in(Path(mlflow_run["work"]) / "mlruns") == []
    assert planted_in(Path(mlflow_run["work"]) / "downloads") == []
    edited = Path(mlflow_run["whole"]) / "envlock" / "edited" / tracked.SNAPSHOT_FILE
    assert json.loads(edited.read_text())["env"]["HF_TOKEN"].startswith("<redacted sha256:")
    work = Path(wandb_run["work"])
    assert planted_in(work / "wandb_dir") == [] and planted_in(work / "wandb_data_dir") == []
    assert planted_in(work / "artifacts") == []


def test_wandb_run_holds_the_snapshot_artifact_summary_and_config(
    runs: Runs, wandb_run: dict[str, Any]
) -> None:
    first, second = snapshot_of(runs.first), snapshot_of(runs.second)
    summary = wandb_run["summary"]["envlock"]
    assert summary["lock_sha256"] == second["lock"]["sha256"]
    assert summary["torch"] == "2.11.0+cu128" and summary["torch_cuda"] == "12.8"
    assert summary["generation"] == second["generation"] and summary["verified"] is True
    train = summary["data"]["train"]
    assert train["listing_sha256"] == second["datasets"]["train"]["listing_sha256"]
    config = wandb_run["config"]
    assert config["lr"] == 1e-3  # the last checkpoint's (W&B's config takes a change)
    assert config["model"] == {"layers": 2, "heads": [4, 4]}  # W&B nests it itself
    assert len(config["notes"]) == 7000  # W&B keeps a long value whole
    assert config["api_key"].startswith("<redacted sha256:")
    artifacts = wandb_run["artifacts"]
    assert [a["type"] for a in artifacts] == [tracked.ARTIFACT_TYPE] * 3
    assert len({a["name"] for a in artifacts}) == 1  # one artifact, a version per checkpoint
    assert [a["metadata"]["checkpoint"] for a in artifacts] == [
        "checkpoint-2",
        "edited",
        "checkpoint-4",
    ]
    assert artifacts[0]["metadata"]["lock_sha256"] == first["lock"]["sha256"]
    staged = Path(artifacts[0]["downloaded"]) / tracked.SNAPSHOT_FILE
    assert staged.read_bytes() == (runs.first / tracked.SNAPSHOT_FILE).read_bytes()
    assert "no active W&B run" in wandb_run["no_run"]


def test_diff_reads_the_snapshots_downloaded_from_either_tracker(
    mlflow_run: dict[str, Any], wandb_run: dict[str, Any]
) -> None:
    """MLflow's whole-run download (envlock/<checkpoint>/ inside) and W&B's artifacts folder
    (<name>:v<N>/ per version): diff takes the newest snapshot in each, and says which."""
    whole = Path(mlflow_run["whole"])
    artifacts = Path(wandb_run["work"]) / "artifacts"
    result = run_envlock("diff", whole, artifacts)
    assert result.returncode == 1, result.stderr
    assert "run.lr    0.0003 → 0.001" in result.stdout
    newest = wandb_run["artifacts"][2]["downloaded"]
    assert f"B: compared the snapshot in {newest} (the newest in {artifacts})" in result.stdout
    # Which snapshot each side is: the newest by step (MLflow's checkpoint-2, not `edited`)
    # and by version (W&B's v2).
    answer = json.loads(run_envlock("diff", "--json", whole, artifacts).stdout)
    assert answer["a"] == str(whole / "envlock" / "checkpoint-2")
    assert answer["b"] == wandb_run["artifacts"][2]["downloaded"]
    # A download of one checkpoint's folder, and one W&B version: read as they are.
    one = Path(mlflow_run["one"])  # download_artifacts names dst/checkpoint-2
    same = run_envlock("diff", one, wandb_run["artifacts"][0]["downloaded"])
    assert same.returncode == 0, same.stdout + same.stderr


def test_a_tracker_download_holding_no_snapshot_is_still_an_error(tmp_path: Path) -> None:
    (tmp_path / "a" / "envlock" / "checkpoint-2").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    result = run_envlock("diff", tmp_path / "a", tmp_path / "b")
    assert result.returncode == 2 and "holds neither" in result.stderr


def test_importing_envlock_and_its_integrations_imports_no_tracker(
    tracker_python: Path, tmp_path: Path
) -> None:
    """In a training environment with both trackers installed: importing envlock and the
    integration modules imports neither library, nor anything beyond the standard library."""
    script = (
        "import sys, envlock, envlock.integrations.mlflow, envlock.integrations.wandb\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded - set(sys.stdlib_module_names) - {'envlock', '__main__'}))\n"
    )
    env = tracker_env(tmp_path, PYTHONPATH=str(CHECKOUT))
    assert run_script(tracker_python, script, [], env) == []


def test_the_integrations_are_python_3_8_and_stdlib_only() -> None:
    """They run in the training script's interpreter: Python 3.8 syntax, and at module level
    nothing but the standard library and envlock (the trackers are imported when called)."""
    modules = [*(CHECKOUT / "envlock" / "integrations").glob("*.py")]
    modules += [CHECKOUT / "envlock" / "base" / name for name in ("flat.py", "secrets.py")]
    allowed = {*sys.stdlib_module_names, "__future__", "envlock"}
    for module in modules:
        tree = ast.parse(module.read_text(), filename=str(module), feature_version=(3, 8))
        for node in tree.body:
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert {n.split(".")[0] for n in names} <= allowed, (module, names)


def test_a_fifo_named_as_the_snapshot_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / tracked.SNAPSHOT_FILE
    os.mkfifo(fifo)
    with pytest.raises(tracked.SnapshotUnreadable, match="not a regular file"):
        tracked.read_snapshot(tracked.snapshot_file(tmp_path))
    (tmp_path / "x.json").write_text("{}")
    with pytest.raises(tracked.SnapshotUnreadable, match="no lock recorded"):
        tracked.read_snapshot(str(tmp_path / "x.json"))
    shutil.rmtree(tmp_path)


def page_example(name: str) -> str:
    """The ```python block of docs/trackers.md that starts `# NAME`."""
    page = (CHECKOUT / "docs" / "trackers.md").read_text()
    (script,) = re.findall(rf"^```python\n(# {re.escape(name)}\n.*?)^```", page, re.M | re.S)
    return script


READ_MLFLOW = """\
import json, mlflow
(run,) = mlflow.MlflowClient().search_runs(["0"])
artifacts = [a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "envlock/a")]
print(json.dumps({"tags": run.data.tags, "params": run.data.params, "artifacts": artifacts}))
"""


def test_the_pages_examples_run_as_written(
    runs: Runs, tracker_python: Path, tmp_path: Path
) -> None:
    """docs/trackers.md's two examples, in a directory holding runs/a (a real snapshot)."""
    env = tracker_env(tmp_path, PYTHONPATH=str(CHECKOUT))
    env["MLFLOW_TRACKING_URI"] = f"file:{tmp_path / 'mlruns'}"
    home = Path(env["HOME"])
    shutil.copytree(runs.first, home / "runs" / "a")
    for name in ("mlflow_example.py", "wandb_example.py"):
        (home / name).write_text(page_example(name))
        proc = subprocess.run(
            [str(tracker_python), name], capture_output=True, text=True, env=env, cwd=home
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    found = run_script(tracker_python, READ_MLFLOW, [], env)
    lock = snapshot_of(runs.first)["lock"]["sha256"]
    assert found["tags"]["envlock.lock_sha256"] == lock
    assert found["params"]["model.layers"] == "2"
    assert found["artifacts"] == ["envlock/a/envlock-snapshot.json"]
    (run_file,) = (tmp_path / "wandb_dir" / "wandb").glob("offline-run-*/run-*.wandb")
    assert lock.encode() in run_file.read_bytes()


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("model.layers", "model.layers"),
        ("optim/betas", "optim/betas"),
        ("a:b@c", "a_b_c"),  # a colon is refused on Windows, `@` everywhere
        ("/abs", "__abs"),
        ("a//b", "_a__b"),
        ("..", "_.."),
        ("", "_"),
    ],
)
def test_a_config_key_becomes_a_name_mlflow_takes(key: str, expected: str) -> None:
    from envlock.integrations.mlflow import name

    assert name(key) == expected
