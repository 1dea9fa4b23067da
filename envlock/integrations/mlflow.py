"""An envlock snapshot in an MLflow run.

    import mlflow
    from envlock.integrations.mlflow import log_snapshot

    with mlflow.start_run():
        path = envlock.snapshot(ckpt_dir, config=args)
        log_snapshot(path)

records the snapshot file as an artifact (envlock/<checkpoint dir>/envlock-snapshot.json),
the lock hash, torch build, generation, profile and dataset fingerprints as `envlock.*`
tags, and the run's config as params (flat `a.b.c` keys), secrets redacted by the one rule.

MLflow is imported when the function runs, never by `import envlock`; stdlib only besides,
Python 3.8 (it runs in the training script: see tracked.py).
"""

from __future__ import annotations

import posixpath
import re
import tempfile
from typing import Any

from envlock.integrations import tracked

# MLflow's bounds (mlflow.utils.validation), for an MLflow that does not say its own.
DEFAULT_LIMITS = {"MAX_ENTITY_KEY_LENGTH": 250, "MAX_PARAM_VAL_LENGTH": 6000}
DEFAULT_LIMITS["MAX_TAG_VAL_LENGTH"] = 8000
# What MLflow accepts in a name on every system (no colon: Windows refuses it).
NOT_IN_NAME = re.compile(r"[^\w.\- /]")


def log_snapshot(snapshot: Any, run: Any = None, artifact_path: str | None = None) -> dict:
    """Record `snapshot` (envlock-snapshot.json, or the directory holding it) in `run` (an
    mlflow Run or ActiveRun, or a run id; default: the active run). Params already on the
    run are kept as they are (MLflow refuses to change one); a name longer than MLflow takes
    is left to the artifact. Returns what was recorded."""
    import mlflow  # the training environment's, when it is used

    path = tracked.snapshot_file(snapshot)
    read = tracked.read_snapshot(path)
    doc = tracked.redacted(read)
    run_id = run_id_of(mlflow, run)
    client = mlflow.MlflowClient()
    limits = bounds()
    tags = {name(k): tracked.bounded(v, limits["MAX_TAG_VAL_LENGTH"]) for k, v in tags_of(doc)}
    existing = client.get_run(run_id).data.params
    params, kept, unnamed = {}, [], []
    for key, value in tracked.hyperparameters(doc).items():
        key = name(key)
        if key in existing:
            kept.append(key)
        elif len(key) > limits["MAX_ENTITY_KEY_LENGTH"] or key in params:
            unnamed.append(key)  # too long, or two keys made one name: in the artifact only
        else:
            params[key] = tracked.bounded(tracked.text(value), limits["MAX_PARAM_VAL_LENGTH"])
    folder = artifact_path or tracked.artifact_dir(path)
    with tempfile.TemporaryDirectory(prefix="envlock-mlflow-") as scratch:
        source = tracked.source_file(path, read, doc, scratch)
        client.log_artifact(run_id, source, folder)
    entities = mlflow.entities
    client.log_batch(
        run_id,
        params=[entities.Param(k, v) for k, v in sorted(params.items())],
        tags=[entities.RunTag(k, v) for k, v in sorted(tags.items())],
    )
    artifact = folder.rstrip("/") + "/" + source.rsplit("/", 1)[-1]
    return {
        "run_id": run_id,
        "artifact": artifact,
        "tags": tags,
        "params": params,
        "kept": kept,  # already on the run (MLflow keeps the first value)
        "unnamed": unnamed,  # no name of their own MLflow takes
    }


def tags_of(doc: dict) -> list:
    """(name, text) of the facts and of each dataset's fingerprint (envlock.data.NAME)."""
    found = list(tracked.facts(doc).items())
    for dataset, fingerprint in tracked.fingerprints(doc).items():
        found.append((tracked.PREFIX + "data." + dataset, tracked.text(fingerprint)))
    return found


def run_id_of(mlflow: Any, run: Any) -> str:
    """The id of `run`, or of the active run; a clear error when there is none."""
    if run is None:
        run = mlflow.active_run()
        if run is None:
            raise RuntimeError(
                "log_snapshot: no active MLflow run; call it inside `with mlflow.start_run():`"
                " or pass run=RUN (a run or its id)"
            )
    if isinstance(run, str):
        return run
    run_id = getattr(getattr(run, "info", None), "run_id", None)
    if not run_id:
        raise TypeError(
            f"log_snapshot: run={run!r} is no MLflow run; pass an mlflow Run or a run id"
        )
    return str(run_id)


def name(key: str) -> str:
    """A key MLflow takes as a param or tag name: other characters become `_`, and a name
    that reads as another path (`..`, `/x`, `a//b`, `a/.`) has its slashes made `_`."""
    key = NOT_IN_NAME.sub("_", key)
    norm = posixpath.normpath(key) if key else ""
    if norm != key or norm in ("", ".") or norm.startswith(("..", "/")):
        key = "_" + key.replace("/", "_")
    return key


def bounds() -> dict:
    """MLflow's own bounds on names and values, where this MLflow says them."""
    try:
        from mlflow.utils import validation
    except ImportError:  # an MLflow that moved them: the bounds of MLflow 2.x and 3.x
        return dict(DEFAULT_LIMITS)
    return {k: int(getattr(validation, k, v)) for k, v in DEFAULT_LIMITS.items()}
