"""Pairs of runs whose one difference lies where a description is lossy (issue #40): a config
value past inspect's budget, a truncated DCP shard, a sidecar no weight reader parses (peft's
adapter_config.json, generation_config.json, a tokenizer file, Lightning's hparams.yaml),
tensor values without --weights. Written by torch, DCP, transformers and peft themselves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.checkpoint_factory import run_torch

COVERAGE_JOB = r"""
import json, shutil, sys, warnings
from pathlib import Path
import torch
import torch.distributed.checkpoint as dcp
warnings.filterwarnings("ignore")
src, out = Path(sys.argv[1]), Path(sys.argv[2])
pairs = {}


def model():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3).state_dict()


def saved(name, args, sd=None):
    path = out / "budget" / f"{name}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": sd if sd is not None else model(), "args": args}, path)
    return str(path)


def pair(name, a, b, **facts):
    pairs[name] = {"a": str(a), "b": str(b), **facts}


# Past inspect's config budget (250,000 objects; 10,000 characters of one string).
files = [f"shards/train-{i:06d}.bin" for i in range(360_000)]
pair("list past the budget", saved("files_300k", {"train_files": files[:300_000]}),
     saved("files_360k", {"train_files": files}))
text = "x" * 149_999
pair("string past the budget", saved("text_a", {"prompt": text + "a"}),
     saved("text_b", {"prompt": text + "b"}))
one = [f"shards/train-{i:06d}.bin" for i in range(100_000)]
other = list(one) + [f"shards/more-{i:06d}.bin" for i in range(60_000)]
other[17] = "shards/replaced.bin"
pair("one element of 100k", saved("one_a", {"train_files": one}),
     saved("one_b", {"train_files": other}))
nudged = {k: v + 1 if k == "bias" else v for k, v in model().items()}
pair("values without --weights", saved("values_a", {"lr": 1e-3}),
     saved("values_b", {"lr": 1e-3}, nudged))

# DCP: one shard cut in half; one shard missing.
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
dcp.save({"model": net.state_dict(), "step": 5}, checkpoint_id=str(out / "dcp" / "a"))
for name in ("truncated", "missing"):
    shutil.copytree(out / "dcp" / "a", out / "dcp" / name)
shard = sorted((out / "dcp" / "truncated").glob("*.distcp"))[0]
shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
for gone in (out / "dcp" / "missing").glob("*.distcp"):
    gone.unlink()
try:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(str(out / "dcp" / "truncated"), str(out / "dcp" / "truncated.pt"))
    torch_reads = True
except BaseException:  # torch's CheckpointException is no Exception
    torch_reads = False
pair("DCP truncated shard", out / "dcp" / "a", out / "dcp" / "truncated", torch_reads=torch_reads)
pair("DCP missing shard", out / "dcp" / "a", out / "dcp" / "missing")

# peft LoRA adapters: lora_alpha 16 vs 32 (twice the scale), the same tensors.
from transformers import LlamaConfig, LlamaForCausalLM
from peft import LoraConfig, get_peft_model


def adapter(name, alpha):
    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(hidden_size=32, num_hidden_layers=1,
                                        intermediate_size=64, num_attention_heads=4,
                                        vocab_size=128))
    lora = get_peft_model(base, LoraConfig(r=4, lora_alpha=alpha,
                                           target_modules=["q_proj", "v_proj"]))
    lora.save_pretrained(out / "lora" / name)
    return json.loads((out / "lora" / name / "adapter_config.json").read_text())


ca, cb = adapter("alpha16", 16), adapter("alpha32", 32)
pair("peft lora_alpha", out / "lora" / "alpha16", out / "lora" / "alpha32",
     changed={k: [ca[k], cb.get(k)] for k in ca if ca[k] != cb.get(k)})

# Sidecars beside a save_pretrained folder: generation_config.json, a tokenizer file, and
# Lightning's hparams.yaml (written as Lightning writes it: YAML, `key: value` lines).
def sidecar(name, edit):
    copy = out / "sidecars" / name
    shutil.copytree(src / "pretrained_a", copy)
    (copy / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0, "b": 1}}}))
    (copy / "hparams.yaml").write_text("lr: 0.001\nbatch_size: 8\n")
    if not (copy / "generation_config.json").exists():  # written only when not the default
        (copy / "generation_config.json").write_text(json.dumps({"do_sample": False}))
    edit(copy)
    return copy


def generation(copy):
    config = json.loads((copy / "generation_config.json").read_text())
    config["temperature"] = 0.7
    (copy / "generation_config.json").write_text(json.dumps(config, indent=2))


base = sidecar("base", lambda copy: None)
pair("generation_config.json", base, sidecar("generation", generation))
pair("tokenizer file", base, sidecar("tokenizer", lambda copy: (copy / "tokenizer.json")
     .write_text(json.dumps({"model": {"vocab": {"a": 0, "c": 1}}}))))
pair("hparams.yaml", base, sidecar("hparams", lambda copy: (copy / "hparams.yaml")
     .write_text("lr: 0.002\nbatch_size: 8\n")))
print(json.dumps(pairs))
"""


def make_pairs(python: Path, layouts_root: Path, root: Path) -> dict[str, dict[str, Any]]:
    """Every pair by name: its two sides and what the libraries said of them."""
    root.mkdir(parents=True, exist_ok=True)
    output = run_torch(python, COVERAGE_JOB, str(layouts_root), str(root), cwd=root)
    return dict(json.loads(output.splitlines()[-1]))
