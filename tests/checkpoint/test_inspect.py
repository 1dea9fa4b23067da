"""`envlock inspect`: real checkpoints written by a real CPU torch, read without torch."""

from __future__ import annotations

import io
import json
import pickle
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envlock.checkpoint.inert import Stub
from envlock.checkpoint.reader import inspect_checkpoint, read_checkpoint_config
from envlock.checkpoint.summary import summary
from envlock.checkpoint.unpickler import RestrictedUnpickler
from envlock.commands.inspect import inspect_cmd
from envlock.errors import OperationError, UsageError
from tests import checkpoint_factory as factory

SCHEMA_KEYS = {
    "schema", "path", "format", "files", "size", "tensors", "sections", "first", "largest",
    "shared_storage", "progress", "config", "structure", "stubbed_globals",
    "suspicious_globals", "notes", "pattern", "keys",
}  # fmt: skip


def inspect_json(path: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(inspect_cmd, [str(path), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def tensors_of(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["key"]: {"dtype": r["dtype"], "shape": r["shape"]} for r in data["keys"]}


@pytest.fixture(scope="module")
def made(torch_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """All small checkpoints, written by one real torch process (see checkpoint_factory)."""
    return factory.make_checkpoints(torch_python, tmp_path_factory.mktemp("checkpoints"))


@pytest.fixture
def training(made: dict[str, Any]) -> dict[str, Any]:
    return made["training"]


@pytest.fixture
def hf_dir(made: dict[str, Any]) -> dict[str, Any]:
    return made["hf"]


# --- torch zip checkpoints ----------------------------------------------------------------------


def test_every_tensor_matches_torch_load(training: dict[str, Any]) -> None:
    data = inspect_json(training["path"], "--keys", "*")
    assert data["schema"] == 1 and set(data) == SCHEMA_KEYS
    assert data["format"] == "torch-zip"
    assert tensors_of(data) == training["tensors"]
    assert [r["key"] for r in data["keys"]] == list(training["tensors"])  # pickle order kept


def test_parameter_counts_match_torch(training: dict[str, Any]) -> None:
    data = inspect_json(training["path"])
    sections = {s["key"]: s for s in data["sections"]}
    model = sections["model_state_dict"]
    # model.parameters() counts the tied head once; the state dict adds the 8-long buffer.
    assert model["numel"] == training["params"] + 8
    assert model["kind"] == "state_dict" and model["tensors"] == len(training["state_dict_keys"])
    prefixes = {p["prefix"]: p for p in model["prefixes"]}
    assert set(prefixes) == {"embed", "block", "norm", "lm_head", "positions"}
    assert prefixes["block"]["numel"] == 16 * 64 + 64 + 64 * 16 + 16
    optimizer = sections["optimizer_state_dict"]
    assert optimizer["kind"] == "optimizer"
    optim_tensors = {k: v for k, v in training["tensors"].items() if k.startswith("optimizer")}
    assert optimizer["tensors"] == len(optim_tensors) == 7 * 3  # step, exp_avg, exp_avg_sq
    optim_numel = sum(_numel(v["shape"]) for v in optim_tensors.values())
    assert optimizer["numel"] == optim_numel
    assert data["tensors"]["params"] == model["numel"] + sections["extras"]["numel"]
    assert data["tensors"]["numel"] == data["tensors"]["params"] + optim_numel


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def test_tied_weight_counted_once_and_reported(training: dict[str, Any]) -> None:
    data = inspect_json(training["path"])
    shared = data["shared_storage"]
    assert len(shared) == 1
    assert shared[0]["keys"] == ["model_state_dict.embed.weight", "model_state_dict.lm_head.weight"]
    assert shared[0]["bytes"] == 64 * 16 * 4
    # Storage bytes are the zip's own data/<key> entries, each counted once.
    with zipfile.ZipFile(training["path"]) as zf:
        entries = [i for i in zf.infolist() if i.filename.startswith("train/data/")]
        stored = sum(i.file_size for i in entries)
    assert data["size"]["tensor_bytes"] == stored
    assert data["tensors"]["storages"] == len(entries) == data["tensors"]["count"] - 1
    total = training["path"].stat().st_size
    assert data["size"]["total_bytes"] == total
    assert data["size"]["other_bytes"] == total - stored


def test_bf16_and_float8_tensors(training: dict[str, Any]) -> None:
    data = inspect_json(training["path"], "--keys", "extras.*")
    rows = {r["key"]: r for r in data["keys"]}
    assert rows["extras.bf16_ema"] == {
        "key": "extras.bf16_ema", "dtype": "bfloat16", "shape": [4, 16], "numel": 64, "bytes": 128,
        "layout": "strided",
    }  # fmt: skip
    assert rows["extras.fp8_weight"]["dtype"] == "float8_e4m3fn"
    assert rows["extras.fp8_weight"]["bytes"] == 8 * 16
    assert data["tensors"]["dtypes"]["float8_e4m3fn"] == {"count": 1, "numel": 128, "bytes": 128}


def test_config_namespace_and_dataclass_become_plain_dicts(training: dict[str, Any]) -> None:
    config = read_checkpoint_config(training["path"])
    assert config == {
        "config": {"lr": 3e-4, "batch_size": 32, "model": {"dim": 16, "vocab": 64}},
        "args": {
            "__class__": "argparse.Namespace",
            "lr": 3e-4,
            "seed": 1234,
            "data": "/data/shards",
            "compile": True,
        },
        "train_config": {
            "__class__": "ckmods.TrainConfig",
            "lr": 3e-4,
            "layers": 2,
            "name": "tiny",
            "betas": [0.9, 0.95],
            "schedule": {"warmup": 10, "kind": "cosine"},
        },
    }
    assert json.loads(json.dumps(config)) == config
    data = inspect_json(training["path"])
    assert data["config"] == config
    assert data["progress"] == {"step": 1200, "epoch": 3, "global_step": 4800}
    assert set(data["stubbed_globals"]) == {"argparse.Namespace", "ckmods.TrainConfig"}
    assert data["suspicious_globals"] == []


def test_keys_pattern_selects_full_dotted_paths(training: dict[str, Any]) -> None:
    data = inspect_json(training["path"], "--keys", "model_state_dict.block.*.weight")
    assert data["pattern"] == "model_state_dict.block.*.weight"
    assert tensors_of(data) == {
        "model_state_dict.block.0.weight": {"dtype": "float32", "shape": [64, 16]},
        "model_state_dict.block.2.weight": {"dtype": "float32", "shape": [16, 64]},
    }
    assert data["keys"][0]["numel"] == 1024 and data["keys"][0]["bytes"] == 4096
    assert inspect_json(training["path"], "--keys", "nothing*")["keys"] == []
    assert inspect_json(training["path"])["keys"] is None


def test_human_output(training: dict[str, Any]) -> None:
    result = CliRunner().invoke(inspect_cmd, [str(training["path"])])
    assert result.exit_code == 0, result.output
    text = result.output
    for expected in (
        "torch-zip",
        "optimizer_state_dict",
        "float8_e4m3fn",
        "step 1200",
        "argparse.Namespace",
        "ckmods.TrainConfig",
        "model_state_dict.embed.weight, model_state_dict.lm_head.weight",
    ):
        assert expected in text, expected
    none = CliRunner().invoke(inspect_cmd, [str(training["path"]), "--keys", "zzz"])
    assert "no tensor key matches 'zzz'" in none.output


def test_keys_prints_only_the_matching_rows(training: dict[str, Any]) -> None:
    """`--keys` answers with the rows asked for, not the whole report before them."""
    result = CliRunner().invoke(inspect_cmd, [str(training["path"]), "--keys", "*lm_head*"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "1 tensor(s) matching '*lm_head*'" in text
    assert "model_state_dict.lm_head.weight" in text
    for report_only in ("step 1200", "ckmods.TrainConfig", "torch-zip", "optimizer_state_dict"):
        assert report_only not in text, report_only


def test_whole_module_pickle_reads_like_its_state_dict(made: dict[str, Any]) -> None:
    whole = made["whole"]
    data = inspect_json(whole["path"], "--keys", "*")
    assert {k: v["shape"] for k, v in tensors_of(data).items()} == whole["shapes"]
    assert data["sections"][0]["kind"] == "module"
    assert [s["keys"] for s in data["shared_storage"]] == [["embed.weight", "lm_head.weight"]]


# --- safetensors --------------------------------------------------------------------------------


def test_safetensors_file(made: dict[str, Any]) -> None:
    st = made["safetensors"]
    data = inspect_json(st["path"], "--keys", "*")
    assert data["format"] == "safetensors"
    assert tensors_of(data) == st["tensors"]
    assert data["size"]["tensor_bytes"] == st["bytes"]
    (header_len,) = struct.unpack("<Q", st["path"].read_bytes()[:8])
    assert data["size"]["other_bytes"] == 8 + header_len
    assert data["tensors"]["dtypes"]["float8_e4m3fn"]["bytes"] == 16
    assert data["tensors"]["dtypes"]["bfloat16"]["bytes"] == 32
    assert read_checkpoint_config(st["path"]) is None


def test_sharded_index(hf_dir: dict[str, Any]) -> None:
    data = inspect_json(hf_dir["path"] / "model.safetensors.index.json", "--keys", "*")
    assert data["format"] == "safetensors-index"
    assert [Path(f["path"]).name for f in data["files"]] == [
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert tensors_of(data) == hf_dir["tensors"]
    assert data["size"]["tensor_bytes"] == hf_dir["bytes"]
    assert data["size"]["total_bytes"] == sum(f["size"] for f in data["files"])


def test_checkpoint_directory(hf_dir: dict[str, Any]) -> None:
    data = inspect_json(hf_dir["path"])
    assert data["format"] == "directory"
    sections = {s["key"]: s for s in data["sections"]}
    assert sections["model.safetensors.index.json"]["tensors"] == len(hf_dir["tensors"])
    assert sections["optimizer.pt"]["kind"] == "optimizer"
    assert sections["optimizer.pt"]["tensors"] == len(hf_dir["optimizer"])
    assert data["progress"] == {"global_step": 500, "epoch": 1.5}
    assert read_checkpoint_config(hf_dir["path"]) == {
        "config.json": {"model_type": "tiny", "hidden_size": 16}
    }
    tensor_bytes = data["size"]["tensor_bytes"]
    assert tensor_bytes == sum(s["bytes"] for s in data["sections"])


# --- malicious pickles --------------------------------------------------------------------------


def test_malicious_checkpoint_is_described_not_executed(
    torch_python: Path, made: dict[str, Any]
) -> None:
    evil, canary = made["malicious"]["path"], made["malicious"]["canary"]
    data = inspect_json(evil)
    run = factory.measure(factory.inspect_argv(str(evil)))
    assert run.returncode == 0, run.stderr
    assert not canary.exists(), "inspect executed code from the pickle"
    assert data["suspicious_globals"] == ["posix.system"]
    payload = data["structure"]["children"]["payload"]
    assert payload["type"] == "posix.system"
    assert payload["children"]["arg0"]["value"] == f"touch {canary}"
    assert "posix.system" in run.stdout
    # The file really is dangerous: torch.load(weights_only=False) runs the payload.
    factory.torch_load_unsafely(torch_python, evil)
    assert canary.exists()


class _Reduce:
    def __init__(self, func: Any, args: tuple[Any, ...]) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.func, self.args)


def _unicode(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _crafted(canary: Path) -> dict[str, bytes]:
    import builtins
    import os
    import subprocess

    touch = f"touch {canary}"
    # getattr(__import__("os"), "system")(touch), in opcodes: pickle.dumps cannot express it.
    getattr_chain = (
        b"\x80\x02cbuiltins\ngetattr\ncbuiltins\n__import__\n"
        + _unicode("os") + b"\x85R" + _unicode("system") + b"\x86R"
        + _unicode(touch) + b"\x85R."
    )  # fmt: skip
    return {
        "eval": pickle.dumps(
            {"x": _Reduce(builtins.eval, (f"__import__('os').system({touch!r})",))}
        ),
        "exec": pickle.dumps(_Reduce(builtins.exec, (f"import os; os.system({touch!r})",)), 2),
        "popen": pickle.dumps([_Reduce(subprocess.Popen, (["touch", str(canary)],))], 2),
        "os.system protocol 0": pickle.dumps(_Reduce(os.system, (touch,)), 0),
        "getattr chain": getattr_chain,
        "INST opcode": b"(S'" + touch.encode() + b"'\nios\nsystem\n.",
        "BUILD on an allowed function": (
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n}X\x08\x00\x00\x00__code__Nsb."
        ),
    }


@pytest.mark.parametrize("name", list(_crafted(Path("x"))))
def test_crafted_pickles_never_run(name: str, tmp_path: Path) -> None:
    canary = tmp_path / "CANARY"
    payload = _crafted(canary)[name]
    path = tmp_path / "crafted.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("crafted/data.pkl", payload)
    try:
        data = summary(inspect_checkpoint(path))
    except OperationError as exc:  # refused as corrupt is fine too: what matters is nothing ran
        assert str(path) in exc.message
    else:
        assert data["suspicious_globals"], data["stubbed_globals"]
    assert not canary.exists()
    if name != "BUILD on an allowed function":  # the payload is real: plain pickle runs it
        raw = tmp_path / "raw.pkl"
        raw.write_bytes(payload)
        load = f"import pickle; pickle.loads(open({str(raw)!r}, 'rb').read())"
        factory.measure([sys.executable, "-c", load])
        deadline = time.monotonic() + 10  # Popen's child may still be starting
        while not canary.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert canary.exists()


def test_unknown_objects_record_name_args_and_state() -> None:
    import argparse

    raw = pickle.dumps({"ns": argparse.Namespace(a=1), "f": _Reduce(print, ("hi",))}, 2)
    unpickler = RestrictedUnpickler(io.BytesIO(raw), source="t", storage_sizes={})
    obj = unpickler.load()
    assert isinstance(obj["ns"], Stub) and obj["ns"].global_name() == "argparse.Namespace"
    assert obj["ns"].fields() == {"a": 1}
    assert obj["f"].global_name() == "builtins.print" and obj["f"].args == ("hi",)
    assert unpickler.stubbed == {"argparse.Namespace": 1, "builtins.print": 1}


def _zip_pickle(path: Path, payload: bytes, storages: int = 0) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{path.stem}/data.pkl", payload)
        for key in range(storages):
            zf.writestr(f"{path.stem}/data/{key}", b"\0" * 4)
    return path


def _one_tensor_pickle() -> bytes:
    """Protocol 2 opcodes for one float32 tensor of storage 0, memoized as 0 (no torch here)."""
    storage = _unicode("storage") + b"ctorch\nFloatStorage\n" + _unicode("0") + _unicode("cpu")
    return (
        b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n((" + storage + b"K\x01tQ"
        + b"K\x00K\x01\x85K\x01\x85tRq\x00"
    )  # fmt: skip


def test_memo_index_bomb_is_refused_before_allocating(tmp_path: Path) -> None:
    # LONG_BINPUT 2**31-1 would make the C unpickler allocate and zero a 16 GiB memo.
    bomb = _zip_pickle(tmp_path / "bomb.pt", b"\x80\x02}r\xff\xff\xff\x7f.")
    with pytest.raises(OperationError, match=r"memo index \d+ out of range"):
        inspect_checkpoint(bomb)


def test_shared_references_do_not_inflate(tmp_path: Path) -> None:
    # Each level holds the previous one twice: 2**40 paths in a few hundred bytes.
    x: list[Any] = []
    for _ in range(40):
        x = [x, x]
    laughs = _zip_pickle(tmp_path / "laughs.pt", pickle.dumps({"config": {"x": x}, "m": x}, 2))
    data = summary(inspect_checkpoint(laughs))  # no tensors inside: walked once, quickly
    assert data["tensors"]["count"] == 0
    levels = b"".join(
        b"h" + bytes([i]) + b"h" + bytes([i]) + b"\x86q" + bytes([i + 1]) for i in range(40)
    )
    inflated = _zip_pickle(tmp_path / "inflated.pt", _one_tensor_pickle() + levels + b".", 1)
    with pytest.raises(OperationError, match=r"refusing: .*shared references"):
        summary(inspect_checkpoint(inflated))
    one = _zip_pickle(tmp_path / "one.pt", _one_tensor_pickle() + b".", 1)
    assert summary(inspect_checkpoint(one))["largest"][0]["shape"] == [1]


def test_names_from_the_file_are_not_rich_markup(tmp_path: Path) -> None:
    # Keys, dtypes and globals come from the file: "[/x]" must print, not break the renderer.
    header = {"[/x].w": {"dtype": "[/bad]", "shape": [2], "data_offsets": [0, 2]}}
    odd = tmp_path / "odd.safetensors"
    factory.write_safetensors_raw(odd, header, b"\0\0")
    glob = _zip_pickle(tmp_path / "glob.pt", b"\x80\x02c[/m]\n[b]x\n)R.")
    for path, expected in ((odd, "[/x].w"), (odd, "[/bad]"), (glob, "[/m].[b]x")):
        for args in (["--keys", "*"], []):  # the rows asked for; the whole report
            result = CliRunner().invoke(inspect_cmd, [str(path), *args])
            assert result.exit_code == 0, result.output
            # A global is named in the report (objects described, not executed), not a row.
            assert expected in result.output or (path == glob and args), (path, args)


# --- broken files -------------------------------------------------------------------------------


def _truncate(path: Path, keep: float) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def _corrupt_pickle(path: Path) -> Path:
    with zipfile.ZipFile(path) as zf:
        info = next(i for i in zf.infolist() if i.filename.endswith("data.pkl"))
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + 10 : start + 40] = b"\xff" * 30
    path.write_bytes(bytes(data))
    return path


def _st(tmp: Path, header: Any, data: bytes = b"", length: int | None = None) -> Path:
    path = tmp / "broken.safetensors"
    factory.write_safetensors_raw(path, header, data, length)
    return path


SPEC = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}
BROKEN: dict[str, Any] = {
    "truncated .pt": lambda t, src: _truncate(src, 0.5),
    "corrupt data.pkl": lambda t, src: _corrupt_pickle(src),
    "empty .pt": lambda t, src: _truncate(src, 0),
    "safetensors data cut": lambda t, src: _st(t, SPEC, b"\0" * 8),
    "safetensors header length": lambda t, src: _st(t, SPEC, b"\0" * 16, length=10**9),
    "safetensors bad json": lambda t, src: _st(t, b"{not json", b""),
    "safetensors wrong size": lambda t, src: _st(
        t, {"w": {"dtype": "F32", "shape": [5], "data_offsets": [0, 16]}}, b"\0" * 16
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_truncated_or_corrupt_files_exit_3(
    case: str, training: dict[str, Any], tmp_path: Path
) -> None:
    src = tmp_path / "copy.pt"
    src.write_bytes(training["path"].read_bytes())
    path = BROKEN[case](tmp_path, src)
    with pytest.raises(OperationError) as info:
        inspect_checkpoint(path)
    assert str(path) in info.value.message
    run = factory.measure(factory.inspect_argv(str(path)))
    assert run.returncode == 3
    assert "Traceback" not in run.stderr and str(path) in run.stderr


def test_index_with_missing_shard(hf_dir: dict[str, Any], tmp_path: Path) -> None:
    index = tmp_path / "model.safetensors.index.json"
    index.write_text((hf_dir["path"] / "model.safetensors.index.json").read_text())
    with pytest.raises(OperationError, match=r"model-00001-of-00002\.safetensors is listed"):
        inspect_checkpoint(index)


def test_usage_errors_exit_2(made: dict[str, Any], tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    plain_zip = tmp_path / "bundle.zip"
    with zipfile.ZipFile(plain_zip, "w") as zf:
        zf.writestr("readme.txt", "hello")
    legacy = made["legacy"]["path"]
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    cases = {
        tmp_path / "missing.pt": "no such file",
        text: "not a checkpoint",
        plain_zip: "without <root>/data.pkl",
        legacy: "legacy torch.save format",
        empty_dir: "no checkpoint files",
    }
    for path, message in cases.items():
        with pytest.raises(UsageError, match=message):
            inspect_checkpoint(path)
        run = factory.measure(factory.inspect_argv(str(path)))
        assert run.returncode == 2, (path, run.stderr)
        assert "Traceback" not in run.stderr
    assert read_checkpoint_config(empty_dir) is None


# --- size independence --------------------------------------------------------------------------


@pytest.mark.slow
def test_one_gigabyte_checkpoint_in_flat_memory(torch_python: Path, tmp_path: Path) -> None:
    big = tmp_path / "big.pt"
    try:
        size = factory.make_big(torch_python, big, gib=1.0)
        assert size >= 2**30
        run = factory.measure(factory.inspect_argv(str(big), "--json"))
        assert run.returncode == 0, run.stderr
        data = json.loads(run.stdout)
        assert data["size"]["tensor_bytes"] == 2**30 + 16 * 4
        assert data["largest"][0] == {
            "key": "model.embed.weight",
            "dtype": "float32",
            "shape": [2**28],
            "numel": 2**28,
            "bytes": 2**30,
            "layout": "strided",
        }
        assert data["progress"] == {"step": 7}
        assert run.peak_rss_bytes < 100 * 2**20, f"peak RSS {run.peak_rss_bytes / 2**20:.0f} MiB"
    finally:
        big.unlink(missing_ok=True)


def test_inspect_never_imports_torch(training: dict[str, Any]) -> None:
    # The suite's interpreter has no torch; even where one is installed, inspect must not load it.
    script = (
        "import sys; from envlock.commands.inspect import main; "
        f"rc = main([{str(training['path'])!r}, '--json']); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    run = factory.measure([sys.executable, "-c", script])
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["tensors"]["count"] == len(training["tensors"])


def test_the_legacy_format_hint_works(
    made: dict[str, Any], torch_python: Path, tmp_path: Path
) -> None:
    """The conversion the refusal suggests runs on a current torch and makes it readable."""
    legacy = tmp_path / "legacy.pt"
    legacy.write_bytes(made["legacy"]["path"].read_bytes())
    refused = factory.measure(factory.inspect_argv(str(legacy)))
    assert refused.returncode == 2
    command = refused.stderr.split("(only for a file you trust): ", 1)[1].split()
    assert command[:2] == ["python", "-c"]
    script = " ".join(command[2:-1]).strip("'")
    subprocess.run([str(torch_python), "-c", script, str(legacy)], check=True)
    converted = factory.measure(factory.inspect_argv(str(legacy)))
    assert converted.returncode == 0, converted.stderr


def test_safetensors_sub_byte_dtypes_are_named_and_sized(tmp_path: Path) -> None:
    """F4 packs two elements a byte, F6 four in three: named as such, sized from the shape."""
    header = {
        "w4": {"dtype": "F4", "shape": [4, 8], "data_offsets": [0, 16]},
        "w6": {"dtype": "F6_E3M2", "shape": [4, 4], "data_offsets": [16, 28]},
    }
    raw = json.dumps(header).encode()
    path = tmp_path / "fp4.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 28)
    data = summary(inspect_checkpoint(path), "*")
    rows = {r["key"]: r for r in data["keys"]}
    # As torch loads F4: float4_e2m1fn_x2 (two a byte), the last dim halved (was: 32 elements
    # of float4_e2m1, where torch counts 16).
    assert (rows["w4"]["dtype"], rows["w4"]["shape"]) == ("float4_e2m1fn_x2", [4, 4])
    assert (rows["w4"]["numel"], rows["w4"]["bytes"]) == (16, 16)
    assert (rows["w6"]["dtype"], rows["w6"]["bytes"]) == ("float6_e3m2", 12)
    bad = {"w4": {"dtype": "F4", "shape": [4, 8], "data_offsets": [0, 32]}}
    raw = json.dumps(bad).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 32)
    with pytest.raises(OperationError, match="does not fit data_offsets"):
        inspect_checkpoint(path)
