"""Real checkpoints for the inspect tests and benchmark, written by a real CPU torch in a venv.

envlock never imports torch; these helpers run scripts with the torch venv's interpreter.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# The module the training script imports: a tiny LM with a tied head and a dataclass config.
MODELS_PY = """
import dataclasses
import torch
from torch import nn


@dataclasses.dataclass
class TrainConfig:
    lr: float = 3e-4
    layers: int = 2
    name: str = "tiny"
    betas: tuple = (0.9, 0.95)
    schedule: dict = dataclasses.field(default_factory=lambda: {"warmup": 10, "kind": "cosine"})


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.block = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied
        self.register_buffer("positions", torch.arange(8))

    def forward(self, idx):
        return self.lm_head(self.norm(self.block(self.embed(idx))))
"""

# Writes safetensors with torch's bytes and envlock's own header writer (no safetensors package).
SAFETENSORS_PY = """
import json, struct
import torch

NAMES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
         torch.int32: "I32", torch.uint8: "U8", torch.int8: "I8", torch.bool: "BOOL",
         torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2", torch.float64: "F64"}


def save_safetensors(tensors, path, metadata=None):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist())
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in blobs:
            f.write(raw)
"""

# Walks what torch.load returns with the same key paths inspect uses.
DESCRIBE_PY = """
import argparse, dataclasses, torch


def describe(obj, path=(), out=None):
    out = {} if out is None else out
    if isinstance(obj, torch.Tensor):
        out[".".join(path)] = {"dtype": str(obj.dtype).removeprefix("torch."),
                               "shape": list(obj.shape)}
    elif isinstance(obj, dict):
        for k, v in obj.items():
            describe(v, (*path, str(k)), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            describe(v, (*path, str(i)), out)
    return out
"""


def run_torch(
    python: Path, script: str, *args: str, cwd: Path | None = None, stdin: str | None = None
) -> str:
    """Run `script` with the torch venv's python; its stdout, or an error with its stderr."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(cwd or "")}
    proc = subprocess.run(
        [str(python), "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        input=stdin,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"torch script failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


TRAINING_JOB = """
import argparse, json, sys, torch
from ckmods import TinyLM, TrainConfig
from ckwrite import describe
torch.manual_seed(0)
model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
model(torch.randint(0, 64, (2, 8))).sum().backward()
opt.step()
ckpt = {
    "model_state_dict": model.state_dict(),
    "optimizer_state_dict": opt.state_dict(),
    "config": {"lr": 3e-4, "batch_size": 32, "model": {"dim": 16, "vocab": 64}},
    "args": argparse.Namespace(lr=3e-4, seed=1234, data="/data/shards", compile=True),
    "train_config": TrainConfig(),
    "step": 1200,
    "epoch": 3,
    "global_step": 4800,
    "extras": {
        "bf16_ema": torch.randn(4, 16).to(torch.bfloat16),
        "fp8_weight": torch.randn(8, 16).to(torch.float8_e4m3fn),
    },
}
torch.save(ckpt, sys.argv[1])
loaded = torch.load(sys.argv[1], weights_only=False)
print(json.dumps({
    "tensors": describe(loaded),
    "params": sum(p.numel() for p in model.parameters()),
    "state_dict_keys": list(model.state_dict()),
}))
"""

# `torch.save(model)`: an nn.Module pickled whole (torch needs its class to load it).
WHOLE_JOB = """
import json, sys, torch
from ckmods import TinyLM
model = TinyLM()
torch.save(model, sys.argv[1])
print(json.dumps({"shapes": {k: list(v.shape) for k, v in model.state_dict().items()}}))
"""

SAFETENSORS_JOB = """
import json, sys, torch
from ckmods import TinyLM
from ckwrite import describe, save_safetensors
sd = {k: v for k, v in TinyLM().state_dict().items() if k != "lm_head.weight"}
sd["scales"] = torch.ones(16).to(torch.float8_e4m3fn)
sd["norm.weight"] = sd["norm.weight"].to(torch.bfloat16)
save_safetensors(sd, sys.argv[1], {"format": "pt"})
print(json.dumps({"tensors": describe(sd), "bytes": sum(t.nbytes for t in sd.values())}))
"""

# A Hugging Face style checkpoint dir: two safetensors shards + index, optimizer, JSON files.
HF_JOB = """
import json, sys, torch
from pathlib import Path
from ckmods import TinyLM
from ckwrite import describe, save_safetensors
out = Path(sys.argv[1])
out.mkdir()
model = TinyLM()
sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
names = list(sd)
shards = {"model-00001-of-00002.safetensors": names[:4],
          "model-00002-of-00002.safetensors": names[4:]}
weight_map = {}
for shard, keys in shards.items():
    save_safetensors({k: sd[k] for k in keys}, out / shard)
    weight_map.update(dict.fromkeys(keys, shard))
total = sum(t.nbytes for t in sd.values())
index = {"metadata": {"total_size": total}, "weight_map": weight_map}
(out / "model.safetensors.index.json").write_text(json.dumps(index))
opt = torch.optim.AdamW(model.parameters())
model(torch.randint(0, 64, (2, 8))).sum().backward()
opt.step()
torch.save(opt.state_dict(), out / "optimizer.pt")
(out / "config.json").write_text(json.dumps({"model_type": "tiny", "hidden_size": 16}))
(out / "trainer_state.json").write_text(json.dumps({"global_step": 500, "epoch": 1.5}))
print(json.dumps({"tensors": describe(sd), "bytes": total,
                  "optimizer": describe(opt.state_dict())}))
"""

# A real torch.save file whose pickle would run `touch CANARY` on torch.load.
MALICIOUS_JOB = """
import os, sys, torch

class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + sys.argv[2],))

torch.save({"model": {"w": torch.zeros(3)}, "payload": Payload()}, sys.argv[1])
"""

LEGACY_JOB = """
import sys, torch
torch.save({"w": torch.zeros(2)}, sys.argv[1], _use_new_zipfile_serialization=False)
"""

# Runs several jobs in one interpreter, so torch is imported once for the whole suite.
_DRIVER = """
import contextlib, io, json, sys
outputs = {}
for name, (script, argv) in json.load(sys.stdin).items():
    sys.argv = ["-c", *argv]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        exec(compile(script, name, "exec"), {"__name__": "__main__"})
    outputs[name] = json.loads(out.getvalue() or "{}")
print(json.dumps(outputs))
"""


def make_checkpoints(python: Path, root: Path) -> dict[str, dict[str, Any]]:
    """Every small checkpoint the suite reads, each with torch's own view of what it holds."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ckmods.py").write_text(MODELS_PY)  # what the pickles name: ckmods.TrainConfig, …
    (root / "ckwrite.py").write_text(SAFETENSORS_PY + DESCRIBE_PY)
    paths = {
        "training": root / "train.pt",
        "whole": root / "whole.pt",
        "safetensors": root / "model.safetensors",
        "hf": root / "hf",
        "malicious": root / "evil.pt",
        "legacy": root / "legacy.pt",
    }
    jobs = {
        "training": TRAINING_JOB,
        "whole": WHOLE_JOB,
        "safetensors": SAFETENSORS_JOB,
        "hf": HF_JOB,
        "malicious": MALICIOUS_JOB,
        "legacy": LEGACY_JOB,
    }
    argv = {name: [str(path)] for name, path in paths.items()}
    argv["malicious"].append(str(root / "CANARY"))
    stdin = json.dumps({name: (jobs[name], argv[name]) for name in jobs})
    views = json.loads(run_torch(python, _DRIVER, cwd=root, stdin=stdin))
    made = {name: {"path": paths[name], **views[name]} for name in jobs}
    made["malicious"]["canary"] = root / "CANARY"
    return made


def torch_load_unsafely(python: Path, path: Path) -> None:
    """torch.load(weights_only=False): what a careless reader would run."""
    run_torch(python, "import sys, torch; torch.load(sys.argv[1], weights_only=False)", str(path))


def make_big(python: Path, path: Path, gib: float = 1.0, layers: int = 0) -> int:
    """A checkpoint of `gib` GiB of float32 (torch.empty: no time spent filling it).

    layers=0: one big `embed.weight`; otherwise that many equal `layers.N.weight` tensors.
    """
    script = """
    import sys, torch
    n, layers = int(float(sys.argv[2]) * 2**30) // 4, int(sys.argv[3])
    if layers:
        model = {f"layers.{i}.weight": torch.empty(n // layers) for i in range(layers)}
    else:
        model = {"embed.weight": torch.empty(n)}
    model["norm.weight"] = torch.ones(16)
    torch.save({"model": model, "step": 7, "config": {"dim": 16}}, sys.argv[1])
    """
    run_torch(python, script, str(path), str(gib), str(layers))
    return path.stat().st_size


def write_safetensors_raw(path: Path, header: Any, data: bytes, length: int | None = None) -> None:
    """A safetensors file from a header object (or raw bytes) and data, written by hand."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


@dataclass(frozen=True)
class Measured:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_bytes: int


# Linux keeps a process's peak RSS from before exec (the forked copy of its parent), so the
# measured command is started by this small launcher, not by the (large) test process: the
# command's ru_maxrss is then max(launcher at fork, ~8 MB; the command's own peak).
_LAUNCHER = """
import os, sys, time
start = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - start
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss} {seconds}")
"""


def measure(argv: list[str], cwd: Path | None = None) -> Measured:
    """Run argv; its exit code, output, wall time and its own peak RSS (from os.wait4)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result"
        launcher = [sys.executable, "-S", "-c", _LAUNCHER, str(result), *argv]
        proc = subprocess.run(launcher, capture_output=True, text=True, cwd=cwd or REPO, env=env)
        if not result.exists():
            raise RuntimeError(f"could not run {argv[:3]}:\n{proc.stderr}")
        code, maxrss, seconds = result.read_text().split()
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return Measured(int(code), proc.stdout, proc.stderr, float(seconds), int(maxrss) * scale)


def inspect_argv(*args: str) -> list[str]:
    """`envlock inspect ARGS` as a fresh process of this (torch-free) interpreter."""
    return [sys.executable, "-m", "envlock.commands.inspect", *args]
