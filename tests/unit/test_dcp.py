"""DCP directories read from hand-assembled `.metadata` pickles (no torch, no process): the
entries become tensors or objects, shards are matched to what .metadata lists, and every
malformed part is refused with its name. Seconds.

The pickles are written with the hostile corpus's assembler, in the shape torch's own
`Metadata` pickles take (dataclasses rebuilt by NEWOBJ + BUILD; TensorProperties by its
state tuple); test_checkpoint_layouts.py reads real ones written by torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envlock.base.limits import BUDGET, Refused, command_budget
from envlock.checkpoint import dcp as dcp_module
from envlock.checkpoint.dcp import by_first_name, is_dcp_dir, read_dcp, with_optimizer_nested
from envlock.checkpoint.inert import Storage, TensorInfo
from envlock.errors import OperationError
from tests.hostile_checkpoints.assemble import PROTO, glob, num, uni

M = "torch.distributed.checkpoint.metadata"


def obj(module: str, name: str, state: bytes) -> bytes:
    """`module.name` made by NEWOBJ without arguments, then BUILD with `state`."""
    return glob(module, name) + b")\x81" + state + b"b"


def fields(items: dict[str, bytes]) -> bytes:
    return b"}(" + b"".join(uni(k) + v for k, v in items.items()) + b"u"


def ints(*dims: int) -> bytes:
    return b"(" + b"".join(num(d) for d in dims) + b"t"


def size(*dims: int) -> bytes:
    return glob("torch", "Size") + b"(" + ints(*dims) + b"tR"


def properties(dtype: str = "float32", as_state: bool = True) -> bytes:
    if as_state:  # what TensorProperties.__getstate__ returns: (dtype, layout, ...)
        return obj(M, "TensorProperties", b"(" + glob("torch", dtype) + b"\x89t")
    return obj(M, "TensorProperties", fields({"dtype": glob("torch", dtype)}))


def tensor_meta(*dims: int, props: bytes | None = None, shape: bytes | None = None) -> bytes:
    return obj(
        M,
        "TensorStorageMetadata",
        fields(
            {
                "properties": properties() if props is None else props,
                "size": size(*dims) if shape is None else shape,
                "chunks": b"]",
            }
        ),
    )


def storage_info(path: str) -> bytes:
    return obj(
        "torch.distributed.checkpoint.filesystem",
        "_StorageInfo",
        fields({"relative_path": uni(path), "offset": num(0), "length": num(8)}),
    )


def metadata(entries: dict[str, bytes], shards: tuple[str, ...] = ()) -> bytes:
    storage = b"}(" + b"".join(num(i) + storage_info(s) for i, s in enumerate(shards)) + b"u"
    body = fields({"state_dict_metadata": fields(entries), "storage_data": storage})
    return PROTO + obj(M, "Metadata", body) + b"."


def dcp(tmp_path: Path, data: bytes, *shards: str) -> Path:
    directory = tmp_path / "step-100"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ".metadata").write_bytes(data)
    for shard in shards:
        (directory / shard).write_bytes(b"\0" * 8)
    return directory


def test_a_dcp_directory_is_described_from_its_metadata(tmp_path: Path) -> None:
    entries = {
        "model.w": tensor_meta(4, 3),
        "model.b": tensor_meta(3, props=properties("bfloat16", as_state=False)),
        "step": obj(M, "BytesStorageMetadata", b"}"),
        "optimizer.state.model.w.exp_avg": tensor_meta(4, 3),
        "optimizer.param_groups.model.w.lr": obj(M, "BytesStorageMetadata", b"}"),
    }
    shards = ("__0_0.distcp", "__1_0.distcp")
    directory = dcp(tmp_path, metadata(entries, shards), *shards, "notes.txt")
    assert is_dcp_dir(directory) and not is_dcp_dir(tmp_path)
    root, files, notes, nbytes = read_dcp(directory)
    assert root["model.w"] == TensorInfo(
        "float32", (4, 3), Storage("step-100", "model.w", "float32", 48), 0
    )
    assert root["model.b"].dtype == "bfloat16" and root["model.b"].storage.nbytes == 6
    assert root["step"] == "<object pickled in a shard>"
    assert root["optimizer"] == {
        "state": {"model.w.exp_avg": root["optimizer"]["state"]["model.w.exp_avg"]},
        "param_groups": {"model.w.lr": "<object pickled in a shard>"},
    }
    assert "optimizer.state.model.w.exp_avg" not in root
    assert [f.name for f in files] == list(shards)
    assert notes == [
        "step-100: torch.distributed.checkpoint, 2 shard file(s) written by 2 rank(s); "
        "described from .metadata (global shapes)",
        # The hand-made shards hold no pickled values where .metadata points: said, not guessed.
        "skipped 2 non-tensor value(s) of step-100: past 1 MiB each or 100,000 in all, "
        "or not where .metadata says",
    ]
    assert nbytes == (directory / ".metadata").stat().st_size


def test_the_shards_on_disk_count_when_metadata_lists_none(tmp_path: Path) -> None:
    directory = dcp(tmp_path, metadata({"w": tensor_meta(2)}), "__0_0.distcp", "__0_1.distcp")
    _, files, notes, _ = read_dcp(directory)
    assert len(files) == 2 and "2 shard file(s) written by 1 rank(s)" in notes[0]
    other = dcp(tmp_path / "x", metadata({"w": tensor_meta(2)}, ("odd.distcp",)), "odd.distcp")
    assert "1 shard file(s) written by ? rank(s)" in read_dcp(other)[2][0]


def test_a_copy_missing_a_listed_shard_is_refused(tmp_path: Path) -> None:
    shards = ("__0_0.distcp", "__1_0.distcp", "__2_0.distcp")
    directory = dcp(tmp_path, metadata({"w": tensor_meta(2)}, shards), "__1_0.distcp")
    with pytest.raises(
        OperationError, match=r"shard '?__0_0\.distcp'? is listed in \.metadata"
    ) as info:
        read_dcp(directory)
    assert "missing (2 of 3): an incomplete copy" in str(info.value)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (PROTO + fields({}) + b".", "not a torch.distributed.checkpoint Metadata"),
        (PROTO + obj(M, "Other", fields({})) + b".", "not a torch.distributed.checkpoint"),
        (
            PROTO + obj(M, "Metadata", fields({"state_dict_metadata": b"]"})) + b".",
            "its state_dict_metadata is not a mapping",
        ),
        (PROTO + obj(M, "Metadata", b"N") + b".", "its state_dict_metadata is not a mapping"),
        (metadata({"w": fields({})}), "w is described by an unknown object"),
        (metadata({"w": tensor_meta(shape=b"N")}), "w has no tensor size"),
        (metadata({"w": tensor_meta(shape=b"(" + uni("4") + b"t")}), "w has no tensor size"),
        (metadata({"w": tensor_meta(shape=b"(\x88t")}), "w has no tensor size"),  # a bool
    ],
)
def test_malformed_metadata_is_refused_with_what_is_wrong(
    tmp_path: Path, data: bytes, says: str
) -> None:
    with pytest.raises(OperationError, match=says):
        read_dcp(dcp(tmp_path, data))


def test_a_name_that_is_not_a_string_is_refused(tmp_path: Path) -> None:
    body = fields(
        {"state_dict_metadata": b"}(" + num(1) + tensor_meta(2) + b"u", "storage_data": b"N"}
    )
    with pytest.raises(OperationError, match="a state_dict_metadata key that is not a name"):
        read_dcp(dcp(tmp_path, PROTO + obj(M, "Metadata", body) + b"."))


def test_shapes_past_torch_s_bounds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="a tensor shape of 65 dims"):
        read_dcp(dcp(tmp_path, metadata({"w": tensor_meta(*([1] * 65))})))
    # A plain tuple (no torch.Size, whose reduce bounds it when unpickled) is bounded alike.
    with pytest.raises(Refused, match="a tensor shape of 65 dims"):
        read_dcp(dcp(tmp_path, metadata({"w": tensor_meta(shape=ints(*([1] * 65)))})))
    with pytest.raises(Refused, match="element count"):
        read_dcp(dcp(tmp_path, metadata({"w": tensor_meta(2**40, 2**40)})))


def test_the_entries_spend_the_command_s_tensor_budget(tmp_path: Path) -> None:
    directory = dcp(tmp_path, metadata({"a": tensor_meta(1), "b": tensor_meta(1)}))
    with command_budget("inspect") as spent:
        read_dcp(directory)
        assert spent.spent["tensors"] == 2


def test_a_dtype_that_cannot_be_read_is_unknown(tmp_path: Path) -> None:
    odd = obj(M, "TensorProperties", b"(" + uni("float32") + b"t")
    not_props = fields({})
    data = metadata({"a": tensor_meta(2, props=odd), "b": tensor_meta(2, props=not_props)})
    root = read_dcp(dcp(tmp_path, data))[0]
    assert (root["a"].dtype, root["b"].dtype) == ("?", "?")


def test_only_an_optimizer_s_state_and_groups_are_nested() -> None:
    flat = {
        "optim.state.w": 1,
        "optimizer.param_groups.g": 2,
        "optimizer.other.x": 3,
        "optimizer.state": 4,
        "model.state.w": 5,
    }
    assert with_optimizer_nested(flat) == {
        "optim": {"state": {"w": 1}, "param_groups": {}},
        "optimizer": {"state": {}, "param_groups": {"g": 2}},
        "optimizer.other.x": 3,
        "optimizer.state": 4,
        "model.state.w": 5,
    }
    # A key of no optimizer part makes no optimizer group.
    assert with_optimizer_nested({"optimizer.other.x": 1}) == {"optimizer.other.x": 1}


def test_links_out_of_the_directory_are_refused_unless_followed(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "meta").write_bytes(metadata({"w": tensor_meta(2)}, ("__0_0.distcp",)))
    (outside / "shard").write_bytes(b"\0" * 8)
    directory = tmp_path / "step-1"
    directory.mkdir()
    (directory / ".metadata").symlink_to(outside / "meta")
    (directory / "__0_0.distcp").write_bytes(b"\0" * 8)
    with pytest.raises(OperationError, match=r"\.metadata"):
        read_dcp(directory)
    assert read_dcp(directory, follow_links=True)[0]["w"].shape == (2,)
    (directory / ".metadata").unlink()
    (directory / ".metadata").write_bytes((outside / "meta").read_bytes())
    (directory / "__0_0.distcp").unlink()
    (directory / "__0_0.distcp").symlink_to(outside / "shard")
    with pytest.raises(OperationError, match=r"__0_0\.distcp"):
        read_dcp(directory)
    assert len(read_dcp(directory, follow_links=True)[1]) == 1


def test_the_limits_and_messages_name_the_metadata_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = dcp(tmp_path, metadata({"a": tensor_meta(1), "b": tensor_meta(1)}))
    meta = directory / ".metadata"
    monkeypatch.setattr(dcp_module, "MAX_TENSORS", 2)
    assert len(read_dcp(directory)[0]) == 2
    monkeypatch.setattr(dcp_module, "MAX_TENSORS", 1)
    with pytest.raises(Refused, match=rf"^refusing: {meta}: 2 entries exceeds 1 tensors a file"):
        read_dcp(directory)
    monkeypatch.undo()
    with command_budget("inspect") as spent:
        spent.spend("tensors", BUDGET["tensors"] - 1)
        with pytest.raises(Refused, match=rf"^refusing: {meta}: the tensors read"):
            read_dcp(directory)
    long = "k" * 250
    with pytest.raises(OperationError) as info:
        read_dcp(dcp(tmp_path, metadata({long: fields({})})))
    assert (
        info.value.message == f"{meta}: {'k' * 200}…(+50 chars) is described by an unknown object"
    )
    with pytest.raises(OperationError) as info:
        read_dcp(dcp(tmp_path, metadata({long: tensor_meta(shape=b"N")})))
    assert info.value.message == f"{meta}: {'k' * 200}…(+50 chars) has no tensor size"
    with pytest.raises(Refused, match=r"a tensor shape of 65 dims"):
        read_dcp(dcp(tmp_path, metadata({"w": tensor_meta(*([1] * 65))})))
    body = fields({"state_dict_metadata": b"}(" + num(1) + tensor_meta(2) + b"u"})
    with pytest.raises(OperationError, match=rf"^{meta}: a state_dict_metadata key"):
        read_dcp(dcp(tmp_path, PROTO + obj(M, "Metadata", body) + b"."))
    missing = "m" * 250 + ".distcp"
    with pytest.raises(OperationError, match=r"shard m{200}…\(\+57 chars\) is listed"):
        read_dcp(dcp(tmp_path / "x", metadata({"w": tensor_meta(2)}, (missing,))))


def test_the_note_counts_the_shards_metadata_lists(tmp_path: Path) -> None:
    shards = ("__0_0.distcp", "__1_0.distcp")
    directory = dcp(tmp_path, metadata({"w": tensor_meta(2)}, shards), *shards, "__7_0.distcp")
    _, files, notes, _ = read_dcp(directory)
    assert len(files) == 3 and "2 shard file(s) written by 2 rank(s)" in notes[0]


def test_an_optimizer_key_that_is_a_value_is_kept() -> None:
    assert with_optimizer_nested({"optimizer": 5, "optimizer.state.x": 1}) == {
        "optimizer": 5,
        "optimizer.state.x": 1,
    }


def test_a_section_s_entries_are_put_under_their_first_name() -> None:
    flat = {
        "model.layers.0.weight": 1,
        "model.bias": 2,
        "step": 3,
        "optimizer.state.w": 4,
        "optim.param_groups.g": 5,
        "head.w": 6,
        "head": 7,
        "tail.": 8,
        "enc.a.b": 9,
        "loose.x.": 10,
    }
    # model's entries are its section; an optimizer stays flat (with_optimizer_nested owns
    # it); a name that is itself an entry, one without a dot, or ending in one stays put.
    assert by_first_name(flat) == {
        "model": {"layers.0.weight": 1, "bias": 2},
        "step": 3,
        "optimizer.state.w": 4,
        "optim.param_groups.g": 5,
        "head.w": 6,
        "head": 7,
        "tail.": 8,
        "enc": {"a.b": 9},
        "loose": {"x.": 10},
    }
    assert list(by_first_name({"a.x": 1, "b": 2, "a.y": 3})) == ["a", "b"]
