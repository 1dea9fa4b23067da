"""An envlock snapshot in a Weights & Biases run.

    import wandb
    from envlock.integrations.wandb import log_snapshot

    run = wandb.init(project="seed")
    path = envlock.snapshot(ckpt_dir, config=args)
    log_snapshot(path)

records the snapshot file as an artifact (type `envlock-snapshot`, one version per call,
the facts in its metadata), the lock hash, torch build, generation, profile and dataset
fingerprints in the run's summary under `envlock`, and the run's config in the run's config
(W&B nests it itself), secrets redacted by the one rule.

wandb is imported when the function runs, never by `import envlock`; stdlib only besides,
Python 3.8 (it runs in the training script: see tracked.py).
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

from envlock.integrations import tracked


def log_snapshot(snapshot: Any, run: Any = None, artifact_name: str | None = None) -> dict:
    """Record `snapshot` (envlock-snapshot.json, or the directory holding it) in `run`
    (default: wandb.run, the one wandb.init started). Returns what was recorded."""
    import wandb  # the training environment's, when it is used

    run = run if run is not None else wandb.run
    if run is None:
        raise RuntimeError(
            "log_snapshot: no active W&B run; call wandb.init() first or pass run=RUN"
        )
    path = tracked.snapshot_file(snapshot)
    read = tracked.read_snapshot(path)
    doc = tracked.redacted(read)
    summary: dict[str, Any] = {
        k[len(tracked.PREFIX) :]: v for k, v in tracked.facts(doc, as_text=False).items()
    }
    summary["data"] = tracked.fingerprints(doc)
    config = tracked.nested(doc.get("config"))
    if config is not None and not isinstance(config, dict):
        config = {"config": config}
    name = artifact_name or "envlock-snapshot-" + re.sub(r"[^A-Za-z0-9._-]", "_", str(run.id))
    metadata = dict(summary, checkpoint=tracked.artifact_dir(path).rsplit("/", 1)[-1])
    artifact = wandb.Artifact(name, type=tracked.ARTIFACT_TYPE, metadata=metadata)
    with tempfile.TemporaryDirectory(prefix="envlock-wandb-") as scratch:
        source = tracked.source_file(path, read, doc, scratch)
        artifact.add_file(source, name=os.path.basename(source))  # copied into W&B's staging
        run.log_artifact(artifact)
    run.summary.update({"envlock": summary})
    if config:
        run.config.update(config, allow_val_change=True)
    return {"artifact": name, "summary": summary, "config": sorted(config or {})}
