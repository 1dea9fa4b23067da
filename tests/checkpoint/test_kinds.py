"""`envlock inspect` on tensors other than plain strided ones, and on storages several tensors
view, each file written by a real CPU torch and compared with what torch.load reads back:
quantized (per tensor, per channel, packed 4-bit), sparse (COO, hybrid COO, CSR, CSC, BSR),
nested (strided and jagged), views of one storage, and raw pickles named `.pt`."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from envlock.checkpoint.reader import inspect_checkpoint
from envlock.checkpoint.regions import Regions
from envlock.checkpoint.summary import summary
from envlock.commands.inspect import inspect_cmd
from tests.checkpoint_factory import run_torch
from tests.conftest import Envlock

KINDS_JOB = r"""
import json, pickle, sys, warnings
from pathlib import Path
import torch
warnings.filterwarnings("ignore")
out = Path(sys.argv[1])
torch.manual_seed(0)
w = torch.randn(4, 6)
kinds = {
    "q_tensor": torch.quantize_per_tensor(w, 0.1, 3, torch.qint8),
    "q_channel": torch.quantize_per_channel(
        w, torch.rand(4, dtype=torch.double) + 0.1, torch.arange(4), 0, torch.quint8),
    "q_packed": torch.quantize_per_tensor(w, 0.1, 0, torch.quint4x2),
    "coo": (torch.eye(5) * 2).to_sparse(),
    "coo_hybrid": torch.randn(4, 3).relu().to_sparse(1),
    "csr": torch.eye(5).to_sparse_csr(),
    "csc": torch.eye(5).to_sparse_csc(),
    "bsr": torch.eye(6).to_sparse_bsr((2, 2)),
    "nested": torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)]),
    "jagged": torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)],
                                         layout=torch.jagged),
    "dense": torch.randn(3, 2),
}
torch.save(kinds, out / "kinds.pt")

PARTS = {torch.sparse_coo: ("_indices", "_values"),
         torch.sparse_csr: ("crow_indices", "col_indices", "values"),
         torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
         torch.sparse_bsr: ("crow_indices", "col_indices", "values")}


def regular(t, dim):
    # A nested tensor's size in `dim`, or None where its components differ (torch raises).
    try:
        return t.size(dim)
    except RuntimeError:
        return None


def view(t):
    # What torch says of the tensor it loaded: dtype, logical shape, layout, numel, bytes held.
    layout = str(t.layout).removeprefix("torch.")
    if t.is_nested and t.layout == torch.strided:
        shape, layout = [regular(t, i) for i in range(t.dim())], "nested"
        parts = [t.values(), t._nested_tensor_size(), t._nested_tensor_strides(),
                 t._nested_tensor_storage_offsets()]
    elif t.is_nested:
        shape = [d if isinstance(d, int) else None for d in t.shape]
        parts = [t.values(), t.offsets()]
    elif t.is_sparse or t.layout in PARTS:
        shape, parts = list(t.shape), [getattr(t, name)() for name in PARTS[t.layout]]
    else:
        shape, parts = list(t.shape), []
    v = {"dtype": str(t.dtype).removeprefix("torch."), "shape": shape, "layout": layout,
         "numel": t.numel()}
    if t.is_quantized:
        v["qscheme"] = str(t.qscheme()).removeprefix("torch.")
        if t.qscheme() == torch.per_channel_affine:
            parts = [t.q_per_channel_scales(), t.q_per_channel_zero_points()]
        v["bytes"] = t.untyped_storage().nbytes() + sum(p.nbytes for p in parts)
    else:
        v["bytes"] = sum(p.nbytes for p in parts) if parts else t.nbytes
    v["parts"] = [list(p.shape) for p in parts]
    return v


loaded = torch.load(out / "kinds.pt", weights_only=False)
views = {"kinds": {k: view(t) for k, t in loaded.items()}}

# Views of one storage: every tensor of the dict names some elements of w's or v's storage.
w, v = torch.randn(10, 10), torch.randn(10, 10)
for name, state in (
    ("views", {"a": w, "b": w[0], "c": w.t()}),
    ("interleaved", {"col": v[:, 0], "row": v[5], "block": v[2:4, 3:7], "again": v[2:4, 3:7].t(),
                     "expanded": torch.zeros(3).expand(4, 3)}),
):
    torch.save(state, out / f"{name}.pt")
    loaded = torch.load(out / f"{name}.pt")
    # The storage elements each storage's tensors cover, counted by torch itself.
    covered = {}
    for t in loaded.values():
        index = torch.arange(t.untyped_storage().nbytes() // t.element_size())
        touched = index.as_strided(t.shape, t.stride(), t.storage_offset()).flatten().tolist()
        covered.setdefault(t.untyped_storage().data_ptr(), set()).update(touched)
    views[name] = {"elements": sum(len(c) for c in covered.values()),
                   "storages": len(covered),
                   "bytes": sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                                 for t in loaded.values()}.values())}

# 0-d tensors: a counter and a loss beside the weights (not parameters), and a 0-d parameter
# inside the model's state dict (one).
scalars = {"model": {"w": torch.randn(3, 4), "scale": torch.tensor(2.0)},
           "step": torch.tensor(5), "loss": torch.tensor(0.25)}
torch.save(scalars, out / "scalars.pt")
views["scalars"] = {"params": sum(t.numel() for t in scalars["model"].values()),
                    "other": 2}

# Raw pickles named .pt: pickle.dump of a state dict (tensors pickled without torch.save), and
# a protocol-0 pickle of plain values.
state = {"w": w, "row": w[0], "half": torch.randn(2, 3).half(), "step": 7}
with open(out / "raw.pt", "wb") as f:
    pickle.dump(state, f)
with open(out / "raw0.pt", "wb") as f:
    pickle.dump({"step": 7, "lr": 0.25, "name": "run"}, f, protocol=0)
with open(out / "raw.pt", "rb") as f:
    back = pickle.load(f)
views["raw"] = {k: {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
                for k, t in back.items() if isinstance(t, torch.Tensor)}
print(json.dumps(views))
"""


@pytest.fixture(scope="module")
def kinds(torch_python: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("kinds")
    views = json.loads(run_torch(torch_python, KINDS_JOB, str(root), cwd=root).splitlines()[-1])
    return {"root": root, **views}


def inspect_json(path: Path, *args: str) -> dict[str, Any]:
    result = CliRunner().invoke(inspect_cmd, [str(path), "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _as_torch_says(row: dict[str, Any]) -> dict[str, Any]:
    said = {k: row[k] for k in ("dtype", "shape", "layout", "numel", "bytes")}
    if "qscheme" in row:
        said["qscheme"] = row["qscheme"]
    said["parts"] = [p["shape"] for p in row.get("parts", [])]
    return said


# --- tensor kinds -------------------------------------------------------------------------------


def test_every_tensor_kind_matches_torch_load(kinds: dict[str, Any]) -> None:
    data = inspect_json(kinds["root"] / "kinds.pt", "--keys", "*")
    rows = {r["key"]: r for r in data["keys"]}
    assert {k: _as_torch_says(r) for k, r in rows.items()} == kinds["kinds"]
    # One row per logical tensor: no argN pieces, nothing left out. Only the jagged tensor's
    # classes (its metadata cache holds torch._dynamo objects) are stubbed: none is a rebuild.
    assert list(rows) == list(kinds["kinds"])
    assert data["stubbed_globals"] == [
        "torch.Tensor",
        "torch._dynamo.decorators._DimRange",
        "torch.nested._internal.nested_tensor.NestedTensor",
    ]


def test_tensor_kinds_name_their_parts(kinds: dict[str, Any]) -> None:
    rows = {r["key"]: r for r in inspect_json(kinds["root"] / "kinds.pt", "--keys", "*")["keys"]}
    names = {k: [p["name"] for p in r.get("parts", [])] for k, r in rows.items()}
    assert names == {
        "q_tensor": [],
        "q_channel": ["scales", "zero_points"],
        "q_packed": [],
        "coo": ["indices", "values"],
        "coo_hybrid": ["indices", "values"],
        "csr": ["crow_indices", "col_indices", "values"],
        "csc": ["ccol_indices", "row_indices", "values"],
        "bsr": ["crow_indices", "col_indices", "values"],
        "nested": ["buffer", "sizes", "strides", "offsets"],
        "jagged": ["values", "offsets"],
        "dense": [],
    }
    assert rows["q_channel"]["parts"][0] == {
        "name": "scales", "dtype": "float64", "shape": [4], "bytes": 32,
    }  # fmt: skip
    assert rows["q_packed"]["bytes"] == 12  # quint4x2: two elements per byte


def test_tensor_kinds_count_their_logical_elements(kinds: dict[str, Any]) -> None:
    # Parameters are the logical tensors' elements, as torch's numel() and num_parameters()
    # count them: a sparse tensor's dense size, a nested tensor's values; bytes are what is
    # stored (indices, values, scales ...), each storage once.
    data = inspect_json(kinds["root"] / "kinds.pt")
    expected = kinds["kinds"]
    assert data["tensors"]["count"] == len(expected)
    assert data["tensors"]["params"] == sum(v["numel"] for v in expected.values())
    assert data["tensors"]["dtypes"]["qint8"] == {"count": 1, "numel": 24, "bytes": 24}
    assert data["tensors"]["dtypes"]["quint8"] == {"count": 1, "numel": 24, "bytes": 24 + 32 + 32}
    assert data["sections"][0]["kind"] == "state_dict"
    # The zip's storages: every part's, the jagged tensor's metadata-cache ones aside.
    assert data["tensors"]["storages"] == 1 + 3 + 1 + 2 + 2 + 3 + 3 + 3 + 4 + 2 + 1
    assert data["shared_storage"] == []


def test_tensor_kinds_for_people(kinds: dict[str, Any]) -> None:
    result = CliRunner().invoke(inspect_cmd, [str(kinds["root"] / "kinds.pt"), "--keys", "*"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[-12:]}
    assert rows["q_channel"] == ["quint8", "(per_channel_affine)", "[4,", "6]", "24", "88", "B"]
    assert rows["q_tensor"][:2] == ["qint8", "(per_tensor_affine)"]
    assert rows["csr"] == ["float32", "(sparse_csr)", "[5,", "5]", "25", "108", "B"]
    # Its dim 2 is 3 in every component: shown (was `[2, *, *]`), as torch's size(2) says.
    assert rows["nested"] == ["float32", "(nested)", "[2,", "*,", "3]", "18", "152", "B"]
    assert rows["jagged"] == ["float32", "(jagged)", "[2,", "*,", "3]", "18", "96", "B"]
    assert rows["dense"] == ["float32", "[3,", "2]", "6", "24", "B"]
    assert "arg0" not in result.output and "arg1" not in result.output


# --- views of one storage -----------------------------------------------------------------------


def test_views_of_one_storage_count_its_elements_once(kinds: dict[str, Any]) -> None:
    data = inspect_json(kinds["root"] / "views.pt")
    assert data["tensors"]["params"] == data["tensors"]["numel"] == 100
    assert kinds["views"] == {"elements": 100, "storages": 1, "bytes": 400}
    # The dtype table counts the storage's bytes once, as the file holds them (not 3 views').
    assert data["tensors"]["dtypes"]["float32"] == {"count": 3, "numel": 100, "bytes": 400}
    assert data["shared_storage"] == [
        {"storage": "views.pt:0", "bytes": 400, "keys": ["a", "b", "c"]}
    ]
    assert data["size"]["tensor_bytes"] == 400
    human = CliRunner().invoke(inspect_cmd, [str(kinds["root"] / "views.pt")]).output
    assert "storages shared by several keys (tied weights or views of one tensor" in human
    assert "a, b, c" in human


def test_interleaved_views_count_what_torch_covers(kinds: dict[str, Any]) -> None:
    # A column, a row across it, a block and its transpose, an expanded vector: the elements
    # they cover, as torch's own indexing of the storage counts them.
    data = inspect_json(kinds["root"] / "interleaved.pt")
    assert data["tensors"]["params"] == kinds["interleaved"]["elements"] == 10 + 9 + 8 + 3
    assert data["notes"] == []
    keys = [s["keys"] for s in data["shared_storage"]]
    assert keys == [["col", "row", "block", "again"]]
    dtype_bytes = sum(d["bytes"] for d in data["tensors"]["dtypes"].values())
    assert dtype_bytes == data["size"]["tensor_bytes"] == kinds["interleaved"]["bytes"]


def test_stray_scalars_are_no_parameters(kinds: dict[str, Any]) -> None:
    """A 0-d step and loss beside the weights are training state, and the step is progress;
    a 0-d tensor inside the model's state dict is a parameter (as the model's count has it)."""
    data = inspect_json(kinds["root"] / "scalars.pt")
    assert data["tensors"]["params"] == kinds["scalars"]["params"] == 13
    assert data["tensors"]["state"]["other"] == kinds["scalars"]["other"]
    assert data["progress"] == {"step": 5}  # a 0-d tensor step is progress, read as a number


@pytest.mark.parametrize(
    ("views", "expected"),
    [
        # (offset, shape, stride) of each view of one 100-element storage, in order.
        ([(0, (10, 10), (10, 1)), (0, (10,), (1,)), (0, (10, 10), (1, 10))], [100, 0, 0]),
        ([(0, (5, 10), (10, 1)), (30, (5, 10), (10, 1)), (20, (8, 10), (10, 1))], [50, 30, 20]),
        ([(0, (10,), (10,)), (50, (10,), (1,))], [10, 9]),
        ([(50, (10,), (1,)), (0, (10,), (10,))], [10, 9]),
        ([(0, (4, 3), (0, 1)), (1, (3,), (1,))], [3, 1]),
        ([(0, (3, 3), (1, 1))], [5]),  # overlapping strides: five distinct elements
        ([(0, (0, 4), (4, 1)), (0, (4,), (1,))], [0, 4]),
    ],
)
def test_regions_count_each_element_once(
    views: list[tuple[int, tuple[int, ...], tuple[int, ...]]], expected: list[int]
) -> None:
    regions = Regions(1_000)
    assert [regions.add("s", *view) for view in views] == expected
    assert not regions.approximate


def test_regions_past_their_budget_count_views_whole() -> None:
    regions = Regions(100)
    assert regions.add("s", 0, (10, 10), (10, 1)) == 100
    assert regions.add("s", 0, (200, 2), (4, 1)) == 400  # 200 runs: counted whole
    assert regions.approximate
    assert regions.add("t", 0, (2**40, 2**20), (2**21, 2)) == 2**60  # never enumerated


# --- raw pickles --------------------------------------------------------------------------------


def test_raw_pickle_of_tensors_is_described(kinds: dict[str, Any]) -> None:
    data = inspect_json(kinds["root"] / "raw.pt", "--keys", "*")
    assert data["format"] == "pickle"
    assert {r["key"]: {"dtype": r["dtype"], "shape": r["shape"]} for r in data["keys"]} == (
        kinds["raw"]
    )
    assert data["tensors"]["params"] == 100 + 6  # w and its row: one storage
    assert [s["keys"] for s in data["shared_storage"]] == [["w", "row"]]
    assert data["progress"] == {"step": 7}
    assert data["stubbed_globals"] == []
    assert any("raw.pt: a raw pickle, not a torch zip archive" in n for n in data["notes"])


def test_protocol_0_pickle_is_described_not_called_corrupt(kinds: dict[str, Any]) -> None:
    result = CliRunner().invoke(inspect_cmd, [str(kinds["root"] / "raw0.pt")])
    assert result.exit_code == 0, result.output
    assert "raw0.pt: a raw pickle, not a torch zip archive" in result.output
    assert "corrupt" not in result.output
    data = summary(inspect_checkpoint(kinds["root"] / "raw0.pt"))
    assert data["format"] == "pickle" and data["progress"] == {"step": 7}
    assert data["structure"]["children"]["lr"] == {"type": "float", "value": 0.25}


def test_raw_pickle_of_a_torch_storage_blob_that_lies(tmp_path: Path, envlock: Envlock) -> None:
    # _load_from_bytes of bytes that are no torch.save stream: corrupt, and nothing runs.
    blob = pickle.dumps(b"not a storage", protocol=2)
    pkl = (
        b"\x80\x02}X\x01\x00\x00\x00w"
        + b"ctorch._utils\n_rebuild_tensor_v2\n(ctorch.storage\n_load_from_bytes\n"
        + b"C"
        + bytes([len(blob)])
        + blob
        + b"\x85RK\x00K\x02\x85K\x01\x85\x89}tRs."
    )
    path = tmp_path / "lying.pt"
    path.write_bytes(pkl)
    result = envlock("inspect", path)
    assert result.returncode == 3, result.stderr
    assert "lying.pt is corrupt" in result.stderr and "no torch.save stream" in result.stderr
