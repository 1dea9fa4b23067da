"""Real training-directory layouts written by the real libraries (transformers, accelerate,
torch.distributed.checkpoint) in the torch test venv, each with the library's own reading."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.checkpoint_factory import run_torch
from tests.support import UV, machine_find_links

# What resolved on 2026-11-30 next to torch 2.13.0+cpu: transformers 5.24.0, accelerate 1.15.0;
# peft 0.21.2 (LoRA adapters: adapter_config.json beside adapter_model.safetensors).
# lightning 2.6.6 (2026-12): Trainer checkpoints (ModelCheckpoint's .ckpt beside hparams.yaml).
HF_PACKAGES = ("transformers==5.24.0", "accelerate==1.15.0", "peft==0.21.2", "lightning==2.6.6")


def install_hf(python: Path) -> None:
    """transformers and accelerate into the torch venv: the machine's find-links plus PyPI."""
    argv = [UV, "pip", "install", "-q", "--python", str(python), *HF_PACKAGES]
    for link in machine_find_links():
        argv += ["--find-links", link]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"could not install {HF_PACKAGES} into the torch venv:\n{proc.stderr}")


LAYOUTS_JOB = r"""
import json, os, sys, warnings
from pathlib import Path
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
from safetensors import safe_open
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from accelerate import Accelerator
from accelerate.utils import set_seed
warnings.filterwarnings("ignore")
out = Path(sys.argv[1])
views = {}


def tiny(rope_theta=10000.0):
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=4,
        vocab_size=128, rope_theta=rope_theta))


def describe(sd):
    return {k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)}
            for k, v in sd.items() if isinstance(v, torch.Tensor)}


def step(model, opt):
    ids = torch.arange(8)[None]
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()


# save_pretrained, twice the same and once with another rope_theta; a Hub-style duplicate.
for name, theta in (("pretrained_a", 1e4), ("pretrained_same", 1e4), ("pretrained_b", 5e5)):
    model = tiny(theta)
    model.save_pretrained(out / name)
with safe_open(str(out / "pretrained_a" / "model.safetensors"), "pt") as f:
    weights = {k: f.get_tensor(k) for k in f.keys()}
views["pretrained"] = {"tensors": describe(weights), "params": tiny().num_parameters()}
dup = out / "hub_download"
model = tiny()
model.save_pretrained(dup)
torch.save(model.state_dict(), dup / "pytorch_model.bin")


# The Trainer, two steps, checkpoint-2/ under each output_dir (same relative name per run).
class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"input_ids": torch.arange(8) + i, "labels": torch.arange(8) + i}


# trainer_moved: trainer_a's settings, another output_dir (absolute, as schedulers pass it).
for name, lr, output in (("trainer_a", 1e-3, "run"), ("trainer_same", 1e-3, "run"),
                         ("trainer_b", 2e-3, "run"),
                         ("trainer_moved", 1e-3, str(out / "trainer_moved" / "elsewhere"))):
    (out / name).mkdir()
    os.chdir(out / name)
    args = TrainingArguments(output_dir=output, max_steps=2, per_device_train_batch_size=4,
                             learning_rate=lr, save_steps=2, report_to=[], use_cpu=True,
                             seed=0, logging_steps=1, disable_tqdm=True)
    Trainer(model=tiny(), args=args, train_dataset=Tokens()).train()
ckpt = out / "trainer_a" / "run" / "checkpoint-2"
views["trainer"] = {
    "rng": describe({"cpu": torch.load(ckpt / "rng_state.pth", weights_only=False)["cpu"]}),
    "lr": torch.load(ckpt / "training_args.bin", weights_only=False).learning_rate,
    "moved_output_dir": torch.load(
        out / "trainer_moved" / "elsewhere" / "checkpoint-2" / "training_args.bin",
        weights_only=False).output_dir,
}


# accelerate save_state with a registered object (custom_checkpoint_0.pkl).
class Scale:
    def __init__(self, value):
        self.value = value

    def state_dict(self):
        return {"scale": self.value}

    def load_state_dict(self, state):
        self.value = state["scale"]


for name, lr, scale in (
    ("accelerate_a", 1e-3, 0.5), ("accelerate_same", 1e-3, 0.5), ("accelerate_b", 2e-3, 0.25)
):
    acc = Accelerator(cpu=True)
    set_seed(0)
    model = tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model, opt = acc.prepare(model, opt)
    acc.register_for_checkpointing(Scale(scale))
    step(model, opt)
    acc.save_state(out / name)
views["accelerate"] = {
    "optimizer_lr": torch.load(out / "accelerate_a" / "optimizer.bin",
                               weights_only=False)["param_groups"][0]["lr"],
}

# torch.distributed.checkpoint, single process; and accelerate's FSDP layout of it
# (save_fsdp_model/save_fsdp_optimizer: dcp.save({"model": ...}) into pytorch_model_fsdp_0/,
# dcp.save({"optimizer": ...}) into optimizer_0/).
model = tiny()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step(model, opt)
dcp.save({"model": model.state_dict()}, checkpoint_id=str(out / "dcp"))
fsdp = out / "fsdp"
dcp.save({"model": model.state_dict()}, checkpoint_id=str(fsdp / "pytorch_model_fsdp_0"))
dcp.save({"optimizer": get_optimizer_state_dict(model, opt)},
         checkpoint_id=str(fsdp / "optimizer_0"))
# torchtitan's way: model and optimizer in one DCP checkpoint.
dcp.save({"model": model.state_dict(), "optimizer": get_optimizer_state_dict(model, opt)},
         checkpoint_id=str(out / "dcp_combined"))
meta = dcp.FileSystemReader(str(out / "dcp")).read_metadata()
views["dcp"] = {
    "tensors": {k: {"dtype": str(v.properties.dtype).removeprefix("torch."), "shape": list(v.size)}
                for k, v in meta.state_dict_metadata.items()},
    "params": model.num_parameters(),
}
optim_meta = dcp.FileSystemReader(str(fsdp / "optimizer_0")).read_metadata()
views["fsdp"] = {
    "optimizer_numel": sum(v.size.numel() for v in optim_meta.state_dict_metadata.values()
                           if hasattr(v, "size")),
}
combined_meta = dcp.FileSystemReader(str(out / "dcp_combined")).read_metadata()
views["dcp_combined"] = {
    "optimizer_numel": sum(v.size.numel() for k, v in combined_meta.state_dict_metadata.items()
                           if k.startswith("optimizer.") and hasattr(v, "size")),
}


# --- Lightning: a Trainer with ModelCheckpoint, two steps each (hparams, callbacks state,
# optimizer and scheduler states, loops); "betas" is an optimizer setting kept out of hparams.
import logging
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


class Net(L.LightningModule):
    def __init__(self, lr=1e-3, hidden=16, betas=(0.9, 0.999)):
        super().__init__()
        self.save_hyperparameters(ignore=["betas"])
        self.betas = betas
        self.net = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Linear(hidden, 1))

    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, betas=self.betas)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1)}


def lightning_run(name, data_seed=0, **hparams):
    torch.manual_seed(data_seed)
    data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    torch.manual_seed(0)
    trainer = L.Trainer(default_root_dir=out / name, max_steps=2, accelerator="cpu",
                        logger=L.pytorch.loggers.CSVLogger(out / name), enable_progress_bar=False,
                        enable_model_summary=False, enable_checkpointing=True,
                        callbacks=[ModelCheckpoint(every_n_train_steps=2)])
    trainer.fit(Net(**hparams), torch.utils.data.DataLoader(data, batch_size=8))
    return trainer.checkpoint_callback.best_model_path


made = {name: lightning_run(name, **kw) for name, kw in (
    ("lightning_a", {}), ("lightning_hparam", {"lr": 2e-3}),
    ("lightning_optimizer", {"betas": (0.8, 0.99)}), ("lightning_values", {"data_seed": 1}))}
ckpt = torch.load(made["lightning_a"], weights_only=False)
views["lightning"] = {
    "ckpt": made, "keys": sorted(ckpt),
    "hyper_parameters": dict(ckpt["hyper_parameters"]),
    "params": sum(t.numel() for t in ckpt["state_dict"].values()),
}
print(json.dumps(views))
"""


def make_layouts(python: Path, root: Path) -> dict[str, Any]:
    """Every layout under `root`, and what the libraries themselves read from them."""
    root.mkdir(parents=True, exist_ok=True)
    views = json.loads(run_torch(python, LAYOUTS_JOB, str(root), cwd=root).splitlines()[-1])
    return {"root": root, **views}
