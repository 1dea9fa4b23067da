"""Pairs of runs that differ in exactly one thing, written by torch, safetensors and DCP from
the session's real layouts (layouts_factory.py), each with torch's own account of what
differs: the ground truth `envlock diff` must report, no more and no less."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.checkpoint_factory import run_torch

VARIANTS_JOB = r"""
import argparse, json, shutil, sys, warnings
from pathlib import Path
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
from safetensors import safe_open
from safetensors.torch import save_file
warnings.filterwarnings("ignore")
src, out = Path(sys.argv[1]), Path(sys.argv[2])
pairs = []


def text(t):
    return f"{str(t.dtype).removeprefix('torch.')} [{', '.join(map(str, t.shape))}]"


def structure(a, b, prefix):
    # {key: [A's "dtype [shape]" or None, B's or None]} for every key that differs.
    keys = list(dict.fromkeys([*a, *b]))
    found = {}
    for k in keys:
        ta, tb = (text(a[k]) if k in a else None), (text(b[k]) if k in b else None)
        if ta != tb:
            found[prefix + k] = [ta, tb]
    pa, pb = sum(t.numel() for t in a.values()), sum(t.numel() for t in b.values())
    if pa != pb:
        found["parameters"] = [pa, pb]
    return found


def changed(a, b, prefix):
    return {prefix + k: [a.get(k), b.get(k)] for k in dict.fromkeys([*a, *b])
            if a.get(k) != b.get(k)}


def param_groups(opt, prefix):
    return {f"{prefix}param_groups.{i}.{k}": (list(v) if isinstance(v, tuple) else v)
            for i, g in enumerate(opt["param_groups"]) for k, v in g.items() if k != "params"}


def pair(layout, what, a, b, truth):
    pairs.append({"layout": layout, "what": what, "a": str(a), "b": str(b),
                  "groups": {k: v for k, v in truth.items() if v}})


EDITS = {  # one structural change each, on one tensor of the model
    "key removed": lambda sd, k: {n: t for n, t in sd.items() if n != k},
    "shape": lambda sd, k: {**sd, k: torch.zeros(3, *sd[k].shape[1:], dtype=sd[k].dtype)},
    "dtype": lambda sd, k: {**sd, k: sd[k].to(torch.float16)},
}


# --- the seed's layout: one torch.save dict of model, optimizer, config, args and step ------
def seed(lr=3e-4, n_embd=32, step=10, edit=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    model(torch.arange(8)).sum().backward()
    opt.step()
    sd = model.state_dict()
    return {"model_state_dict": EDITS[edit](sd, "1.weight") if edit else sd,
            "optimizer_state_dict": opt.state_dict(),
            "config": {"n_layer": 2, "n_embd": n_embd, "dropout": 0.0},
            "args": argparse.Namespace(batch_size=8, max_iters=100), "step": step, "epoch": 1}


def seed_truth(a, b):
    pa = param_groups(a["optimizer_state_dict"], "checkpoint.optimizer_state_dict.")
    pb = param_groups(b["optimizer_state_dict"], "checkpoint.optimizer_state_dict.")
    hyper = changed(pa, pb, "")
    hyper.update(changed(a["config"], b["config"], "checkpoint.config."))
    hyper.update(changed(vars(a["args"]), vars(b["args"]), "checkpoint.args."))
    progress = {k: [a[k], b[k]] for k in ("step", "epoch") if a[k] != b[k]}
    return {"structure": structure(a["model_state_dict"], b["model_state_dict"],
                                   "model_state_dict."),
            "hyperparameters": hyper, "progress": progress}


SEED = {"base": {}, "lr": {"lr": 1e-3}, "config value": {"n_embd": 48}, "step": {"step": 20},
        **{what: {"edit": what} for what in EDITS}}
for what, kwargs in SEED.items():
    (out / "seed" / what).mkdir(parents=True)
    torch.save(seed(**kwargs), out / "seed" / what / "ckpt.pt")
base = torch.load(out / "seed" / "base" / "ckpt.pt", weights_only=False)
torch.save(base["model_state_dict"], out / "seed" / "bare.pt")  # the same weights, nothing else
for what in SEED:
    if what != "base":
        other = torch.load(out / "seed" / what / "ckpt.pt", weights_only=False)
        truth = seed_truth(base, other)
        pair("seed file", what, out / "seed/base/ckpt.pt", out / "seed" / what / "ckpt.pt", truth)
        if what in ("lr", "step"):  # the same, given as directories
            pair("seed dir", what, out / "seed/base", out / "seed" / what, truth)


# --- safetensors weights in save_pretrained, Trainer and accelerate folders -----------------
def tensors(path):
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def folder(layout, name, base_dir, weights, key, config_edit=None, lr=None):
    copy = out / layout / name
    shutil.copytree(base_dir, copy)
    path = copy / weights
    before = tensors(path)
    truth = {"structure": {}, "hyperparameters": {}}
    if name in EDITS:
        after = EDITS[name](before, key)
        save_file(after, str(path), metadata={"format": "pt"})
        truth["structure"] = structure(before, after, f"{weights}.")
    if config_edit:
        config = json.loads((copy / "config.json").read_text())
        edited = {**config, **config_edit}
        (copy / "config.json").write_text(json.dumps(edited, indent=2))
        truth["hyperparameters"] = changed(config, edited, "config.json: ")
    if lr:
        opt = torch.load(copy / "optimizer.bin", weights_only=False)
        old = param_groups(opt, "optimizer.bin: ")
        opt["param_groups"][0]["lr"] = lr
        torch.save(opt, copy / "optimizer.bin")
        truth["hyperparameters"] = changed(old, param_groups(opt, "optimizer.bin: "), "")
    return copy, truth


layer, weights = "model.layers.0.mlp.up_proj.weight", "model.safetensors"
for name, kwargs in (("config value", {"config_edit": {"rms_norm_eps": 1e-5}}),
                     *((what, {}) for what in EDITS)):
    b, truth = folder("pretrained", name, src / "pretrained_a", weights, layer, **kwargs)
    # Its one weights file beside config.json is read as itself: keys without the file name.
    truth["structure"] = {k.replace(f"{weights}.", ""): v for k, v in truth["structure"].items()}
    pair("save_pretrained", name, src / "pretrained_a", b, truth)
for name, kwargs in (("lr", {"lr": 2e-3}), *((what, {}) for what in EDITS)):
    b, truth = folder("accelerate", name, src / "accelerate_a", weights, layer, **kwargs)
    pair("accelerate save_state", name, src / "accelerate_a", b, truth)
b, truth = folder("trainer", "shape", src / "trainer_a" / "run", "checkpoint-2/model.safetensors",
                  layer)
truth["structure"] = {k.replace("checkpoint-2/", ""): v for k, v in truth["structure"].items()}
pair("Trainer output_dir", "shape", src / "trainer_a" / "run", b, truth)


# --- torch.distributed.checkpoint: model, optimizer and step in one, saved in one process ----
# (torchtitan's layout); step, lr and betas are small torch.save blobs inside the shard.
def dcp_run(name, lr=1e-3, step=5, edit=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95))
    model(torch.ones(2, 16)).sum().backward()
    opt.step()
    sd = dict(model.state_dict())
    state = {"model": EDITS[edit](sd, "0.weight") if edit else sd, "step": step,
             "optimizer": get_optimizer_state_dict(model, opt)}
    dcp.save(state, checkpoint_id=str(out / "dcp" / name))
    return state


def dcp_truth(a, b, name_a, name_b):
    meta = {d: dcp.FileSystemReader(str(out / "dcp" / d)).read_metadata().state_dict_metadata
            for d in (name_a, name_b)}
    views = [{k: torch.empty(v.size, dtype=v.properties.dtype, device="meta")
              for k, v in meta[d].items() if hasattr(v, "size")} for d in (name_a, name_b)]
    truth = structure(*views, "")
    truth.pop("parameters", None)  # the model's own count, below: optimizer state is not
    pa, pb = (sum(t.numel() for k, t in v.items() if k.startswith("model.")) for v in views)
    if pa != pb:
        truth["parameters"] = [pa, pb]
    groups = [param_groups(s["optimizer"], "checkpoint.optimizer.") for s in (a, b)]
    progress = {"step": [a["step"], b["step"]]} if a["step"] != b["step"] else {}
    return {"structure": truth, "hyperparameters": changed(*groups, ""), "progress": progress}


dcp_base = dcp_run("base")
for what, kwargs in (("lr", {"lr": 3e-4}), ("step", {"step": 9}),
                     *((what, {"edit": what}) for what in EDITS)):
    other = dcp_run(what, **kwargs)
    truth = dcp_truth(dcp_base, other, "base", what)
    pair("DCP", what, out / "dcp" / "base", out / "dcp" / what, truth)

# --- accelerate's FSDP folder: optimizer_0/ (a DCP directory) saved again, lr changed ------
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save


def fsdp_run(name, lr=None):
    copy = out / "fsdp" / name
    shutil.copytree(src / "fsdp", copy)
    dcp_to_torch_save(str(copy / "optimizer_0"), str(out / "fsdp" / f"{name}.pt"))
    state = torch.load(out / "fsdp" / f"{name}.pt", weights_only=False)
    if lr is not None:
        state["optimizer"]["param_groups"][0]["lr"] = lr
    shutil.rmtree(copy / "optimizer_0")
    dcp.save(state, checkpoint_id=str(copy / "optimizer_0"))
    return copy, param_groups(state["optimizer"], "checkpoint.optimizer_0.optimizer.")


fsdp_a, groups_a = fsdp_run("base")
fsdp_b, groups_b = fsdp_run("lr", lr=2e-4)
pair("accelerate FSDP", "lr", fsdp_a, fsdp_b, {"hyperparameters": changed(groups_a, groups_b, "")})

# --- the same keys, shapes, dtypes and config, one tensor's values changed (diff --weights) --
import hashlib


def digest(t):  # what --weights must find: sha256 of the elements in row-major order
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def nudged(sd, k):
    return {**sd, k: sd[k] + 1}


def values(fmt, a, b, sd_a, sd_b, prefix=""):
    keys = [k for k in sd_a if not torch.equal(sd_a[k], sd_b[k])]
    pairs.append({"layout": "values", "format": fmt, "a": str(a), "b": str(b),
                  "differ": {prefix + k: [digest(sd_a[k]), digest(sd_b[k])] for k in keys},
                  "same": {prefix + k: digest(sd_a[k]) for k in sd_a if k not in keys}})


(out / "values").mkdir()
seed_a = seed()
seed_b = {**seed_a, "model_state_dict": nudged(seed_a["model_state_dict"], "1.bias")}
torch.save(seed_a, out / "values" / "a.pt")
torch.save(seed_b, out / "values" / "b.pt")
values("torch-zip", out / "values/a.pt", out / "values/b.pt", seed_a["model_state_dict"],
       seed_b["model_state_dict"], "model_state_dict.")
st_a = tensors(src / "pretrained_a" / weights)
st_b = nudged(st_a, layer)
for name, sd in (("a", st_a), ("b", st_b)):
    save_file(sd, str(out / "values" / f"{name}.safetensors"), metadata={"format": "pt"})
values("safetensors", out / "values/a.safetensors", out / "values/b.safetensors", st_a, st_b)
dcp_values = {k: t for k, t in dcp_base["model"].items()}
dcp.save({"model": nudged(dcp_values, "0.bias"), "step": 5,
          "optimizer": dcp_base["optimizer"]}, checkpoint_id=str(out / "values" / "dcp_b"))
values("dcp", out / "dcp" / "base", out / "values/dcp_b", dcp_values,
       nudged(dcp_values, "0.bias"), "model.")

# --- one float4 tensor (two a byte) in a .pt and a .safetensors: as torch counts it --------
f4 = torch.randint(0, 255, (4, 6), dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
torch.save({"w": f4}, out / "values" / "f4.pt")
save_file({"w": f4}, str(out / "values" / "f4.safetensors"))
back = tensors(out / "values" / "f4.safetensors")["w"]
pairs.append({"layout": "float4", "a": str(out / "values/f4.pt"),
              "b": str(out / "values/f4.safetensors"), "dtype": text(back),
              "numel": [f4.numel(), back.numel()]})

# --- Lightning: Trainer checkpoints of layouts_factory.py, as torch.load reads them --------
def lightning_ckpt(name):
    return next((src / name).rglob("*.ckpt"))


def rendered(v):  # a value as inspect renders it: a tensor by its dtype and shape
    if isinstance(v, torch.Tensor):
        return f"tensor({str(v.dtype).removeprefix('torch.')}, {list(v.shape)})"
    if isinstance(v, dict):
        return {str(k): rendered(x) for k, x in v.items()}
    return [rendered(x) for x in v] if isinstance(v, (list, tuple)) else v


def flat(v, prefix):
    if not isinstance(v, dict):
        return {prefix: v}
    return {k: x for key, item in v.items() for k, x in flat(item, f"{prefix}.{key}").items()}


def lightning_truth(a, b):
    elsewhere = ("state_dict", "optimizer_states", "hyper_parameters", "epoch", "global_step")
    hyper = [{**flat(dict(c["hyper_parameters"]), "checkpoint.hyper_parameters"),
              **param_groups(c["optimizer_states"][0], "checkpoint.optimizer_states.0.")}
             for c in (a, b)]
    state = [{k: v for key in c if key not in elsewhere
              for k, v in flat(rendered(c[key]), f"checkpoint.{key}").items()
              if not (isinstance(v, str) and v.startswith("/")) and "/" not in k}
             for c in (a, b)]
    return {"hyperparameters": changed(*hyper, ""), "training state": changed(*state, ""),
            "structure": structure(a["state_dict"], b["state_dict"], "state_dict.")}


def tensors_under(v, path=()):
    if isinstance(v, torch.Tensor):
        return {".".join(path): v}
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    return {k: t for key, x in items for k, t in tensors_under(x, (*path, str(key))).items()}


lit_a = torch.load(lightning_ckpt("lightning_a"), weights_only=False)
for what, name in (("hparam", "lightning_hparam"), ("optimizer setting", "lightning_optimizer")):
    other = torch.load(lightning_ckpt(name), weights_only=False)
    pair("Lightning", what, lightning_ckpt("lightning_a"), lightning_ckpt(name),
         lightning_truth(lit_a, other))
lit_b = torch.load(lightning_ckpt("lightning_values"), weights_only=False)
ta, tb = tensors_under(lit_a), tensors_under(lit_b)
pairs.append({"layout": "Lightning values", "a": str(lightning_ckpt("lightning_a")),
              "b": str(lightning_ckpt("lightning_values")),
              "truth": lightning_truth(lit_a, lit_b), "tensors": len(ta),
              "differ": sorted(k for k in ta if not torch.equal(ta[k], tb[k]))})

# --- an FSDP2 (DTensor) state dict saved by rank 0 of 2, made by fully_shard over torch's own
# fake process group (one process; last: it initializes torch.distributed) -----------------
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore

dist.init_process_group("fake", rank=0, world_size=2, store=FakeStore())
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 3))
fully_shard(model)
sd = model.state_dict()
torch.save(sd, out / "fsdp2_rank0.pt")
dtensors = {k: {"local": list(v.to_local().shape), "global": list(v.shape),
                "numel": v.to_local().numel()} for k, v in sd.items()}
dist.destroy_process_group()
print(json.dumps(pairs + [{"layout": "DTensor", "path": str(out / "fsdp2_rank0.pt"),
                           "tensors": dtensors}]))
"""


def make_variants(python: Path, layouts_root: Path, root: Path) -> list[dict[str, Any]]:
    """Every pair, with torch's account of what differs between its two sides (and, last,
    rank 0's file of an FSDP2 state dict with torch's local and global shapes)."""
    root.mkdir(parents=True, exist_ok=True)
    output = run_torch(python, VARIANTS_JOB, str(layouts_root), str(root), cwd=root)
    return list(json.loads(output.splitlines()[-1]))
