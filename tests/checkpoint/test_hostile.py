"""`envlock inspect` on hostile checkpoints: every file of the corpus (hostile_checkpoints/
make_corpus.py) ends in a description (exit 0) or a clear refusal (exit 3), within a memory cap,
with nothing from the file reaching the terminal raw and nothing in it executed.

Each run is the real CLI in a fresh process under RLIMIT_AS; its peak RSS is read back with
getrusage(RUSAGE_CHILDREN) by a small launcher, so the figure is the CLI's own. The subprocess
timeout only guarantees the suite ends; no test asserts on time.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envlock import ui
from envlock.base.secrets import redact
from envlock.checkpoint.reader import inspect_checkpoint, read_checkpoint_config
from envlock.checkpoint.summary import summary
from envlock.commands.inspect import render
from envlock.errors import EnvlockError, OperationError
from tests.hostile_checkpoints import assemble, make_corpus
from tests.hostile_checkpoints.make_corpus import Case

REPO = Path(__file__).resolve().parents[2]
ADDRESS_SPACE = 1024 * 2**20  # RLIMIT_AS of each run: a runaway allocation fails, not the host
PEAK_RSS = 100 * 2**20  # what inspect may use on any file of the corpus
GIVE_UP = 60  # seconds: only so that a hang fails the suite instead of stalling it

# Started by the test under RLIMIT_AS, it spawns the CLI (inheriting the cap) and reports the
# CLI's exit code and peak RSS: RUSAGE_CHILDREN of a small process holds only its one child.
_LAUNCHER = """
import os, resource, sys
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status = os.waitpid(pid, 0)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
with open(sys.argv[1], "w") as f:
    f.write(f"{os.waitstatus_to_exitcode(status)} {peak}")
"""


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_inspect(*args: str) -> Run:
    """`python -m envlock inspect ARGS` under the memory cap; a hang is killed, group and all."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "PYTHONWARNINGS": "ignore"}
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result"
        argv = [sys.executable, "-m", "envlock", "inspect", *args]
        launcher = [sys.executable, "-S", "-c", _LAUNCHER, str(result), *argv]
        proc = subprocess.Popen(
            launcher,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env=env,
            preexec_fn=_cap_memory,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=GIVE_UP)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"inspect {' '.join(args)} did not finish in {GIVE_UP} s")
        code, peak = result.read_text().split()
    text = {"encoding": "utf-8", "errors": "backslashreplace"}
    return Run(int(code), out.decode(**text), err.decode(**text), int(peak) * 1024)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    return make_corpus.build(tmp_path_factory.mktemp("hostile"))


def _check_run(case: Case, run: Run, *, human: bool) -> None:
    where = f"{case.name} ({'human' if human else 'json'})"
    assert run.returncode == case.exit_code, f"{where}: {run.returncode}\n{run.stderr[-2000:]}"
    assert "Traceback" not in run.stderr, f"{where}:\n{run.stderr[-3000:]}"
    if run.returncode == 3:
        assert run.stderr.startswith("error: "), f"{where}: {run.stderr[:500]}"
        assert case.says in run.stderr, f"{where}: {run.stderr[:500]}"
    output = run.stdout + run.stderr
    assert "\x1b" not in output and "\x9b" not in output, f"{where}: a raw escape reached output"
    for text in case.absent:
        assert text not in output, f"{where}: {text!r} reached the output"
    if human:
        for text in case.present:
            assert text in output, f"{where}: {text!r} missing from\n{output[-3000:]}"
    elif run.returncode == 0:
        assert json.loads(run.stdout)["schema"] == 1
    assert run.peak_rss <= PEAK_RSS, f"{where}: peak RSS {run.peak_rss / 2**20:.0f} MiB"
    assert case.canary is None or not case.canary.exists(), f"{where}: the payload ran"


@pytest.mark.parametrize("name", list(make_corpus.CASES))
def test_hostile_file_is_described_or_refused(name: str, corpus: dict[str, Case]) -> None:
    case = corpus[name]
    _check_run(case, run_inspect(str(case.path), *case.args), human=True)
    _check_run(case, run_inspect(str(case.path), *case.args, "--json"), human=False)


def test_refusals_name_the_limit(corpus: dict[str, Case]) -> None:
    run = run_inspect(str(corpus["hash_bomb_tuple_key"].path))
    assert "refusing: " in run.stderr and " exceeds " in run.stderr
    assert str(corpus["hash_bomb_tuple_key"].path) in run.stderr
    assert "hint: " in run.stderr


def test_follow_links_reads_what_a_directory_links_to(corpus: dict[str, Case]) -> None:
    linked = corpus["dir_symlinked_secrets"].path
    plain = json.loads(run_inspect(str(linked), "--json").stdout)
    assert "config.json" not in {Path(f["path"]).name for f in plain["files"]}
    followed = json.loads(run_inspect(str(linked), "--json", "--follow-links").stdout)
    names = {Path(f["path"]).name for f in followed["files"]}
    assert {"config.json", "other.pt"} <= names
    # Read through the link; shown as every config is shown, its secrets redacted (#24).
    assert followed["config"] == {"config.json": {"private_key": redact("SECRET-KEY-MATERIAL")}}


def test_follow_links_reads_shards_outside_the_index(corpus: dict[str, Case]) -> None:
    index = corpus["index_traversal"].path
    run = run_inspect(str(index), "--json", "--follow-links")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["tensors"]["count"] == 1


def test_diff_reads_no_config_through_a_link_out(corpus: dict[str, Case], tmp_path: Path) -> None:
    # envlock diff reads the newest checkpoint of a directory with read_checkpoint_config.
    (tmp_path / "last.pt").symlink_to(corpus["raw_pickle"].path)
    with pytest.raises(OperationError, match="a link out of its directory"):
        read_checkpoint_config(tmp_path / "last.pt")
    assert read_checkpoint_config(tmp_path / "last.pt", follow_links=True) is None


def test_raw_pickle_is_described(corpus: dict[str, Case]) -> None:
    data = summary(inspect_checkpoint(corpus["raw_pickle"].path))
    assert data["format"] == "pickle"
    assert data["progress"] == {"step": 3}
    assert any("a raw pickle, not a torch zip archive" in note for note in data["notes"])


# --- fuzzing: mutations of small valid checkpoints ----------------------------------------------


def _tensor_dict() -> bytes:
    items = {"model.w": assemble.tensor(), "model.b": assemble.tensor("1"), "step": assemble.num(7)}
    config = assemble.state_dict({"lr": b"G" + struct.pack(">d", 3e-4), "name": b"N"})
    return assemble.PROTO + assemble.state_dict({**items, "config": config}) + b"."


BASES = [
    _tensor_dict(),
    pickle.dumps({"config": {"lr": 0.1, "betas": (0.9, 0.95)}, "losses": [1.0, 2.0]}, 2),
    pickle.dumps({"s": {1, 2}, "f": frozenset({(1, 2)}), "b": b"xyz", "t": ((1,), (1,))}, 4),
    pickle.dumps([{"k": [1, 2, 3]}, {"k": [4]}, "x" * 40, 2**70, -1.5, None, True], 0),
]
_edit = st.tuples(st.integers(0, 4096), st.integers(0, 255), st.sampled_from("sid"))


def _mutate(data: bytes, edits: list[tuple[int, int, str]]) -> bytes:
    out = bytearray(data)
    for pos, byte, kind in edits:
        at = pos % (len(out) + 1)
        if kind == "s" and at < len(out):
            out[at] = byte
        elif kind == "i":
            out.insert(at, byte)
        elif kind == "d" and at < len(out):
            del out[at]
    return bytes(out)


def _inspect_bytes(directory: Path, name: str, data: bytes) -> None:
    """Read `data` as a checkpoint and render it: a report or an EnvlockError, nothing else."""
    path = directory / name
    path.write_bytes(data)
    try:
        doc = summary(inspect_checkpoint(path))
    except EnvlockError:
        return
    json.dumps(doc)
    with ui.out.capture() as captured:
        render(doc)
    assert "\x1b" not in captured.get()


def _zipped(data: bytes, storages: int = 2) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("fuzz/data.pkl", data)
        for key in range(storages):
            zf.writestr(f"fuzz/data/{key}", b"\0" * 16)
    return buffer.getvalue()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(BASES), edits=st.lists(_edit, max_size=6))
def test_fuzz_mutated_pickles(base: bytes, edits: list[tuple[int, int, str]]) -> None:
    data = _mutate(base, edits)
    with tempfile.TemporaryDirectory() as tmp:
        _inspect_bytes(Path(tmp), "fuzz.pt", _zipped(data))
        _inspect_bytes(Path(tmp), "raw.pt", data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=512))
def test_fuzz_random_bytes(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _inspect_bytes(Path(tmp), "fuzz.pt", _zipped(b"\x80\x02" + data))
        _inspect_bytes(Path(tmp), "raw.pt", b"\x80\x02" + data)
        _inspect_bytes(Path(tmp), "rand.safetensors", data)


_HEADER = json.dumps(
    {
        "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b": {"dtype": "BF16", "shape": [4], "data_offsets": [16, 24]},
        "__metadata__": {"format": "pt"},
    }
).encode()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(_edit, max_size=6))
def test_fuzz_mutated_safetensors_headers(edits: list[tuple[int, int, str]]) -> None:
    header = _mutate(_HEADER, edits)
    data = struct.pack("<Q", len(header)) + header + b"\0" * 24
    with tempfile.TemporaryDirectory() as tmp:
        _inspect_bytes(Path(tmp), "fuzz.safetensors", data)


def _any_value() -> Any:
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=20,
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_any_value(), protocol=st.integers(0, 5))
def test_fuzz_plain_pickles_are_described(value: Any, protocol: int) -> None:
    # Real pickles of plain values: always described (exit-0 path), never refused.
    data = pickle.dumps({"config": value}, protocol)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plain.pt"
        path.write_bytes(_zipped(data, storages=0))
        doc = summary(inspect_checkpoint(path))
        json.dumps(doc)


def test_training_state_repeating_one_shared_value_is_refused(tmp_path: Path) -> None:
    """2,000 top-level entries naming one 1,000-item list (a 30 kB pickle): rendering each
    for diff's training state would walk 2 M objects; refused, naming the file (exit 3)."""
    shared = list(range(1_000))
    path = tmp_path / "shared.pt"
    path.write_bytes(pickle.dumps({f"entry_{i}": shared for i in range(2_000)}, protocol=2))
    from click.testing import CliRunner

    from envlock.cli import cli

    result = CliRunner().invoke(cli, ["diff", str(path), str(path)])
    assert result.exit_code == 3, result.output
    assert f"refusing: {path}: rendering the checkpoint's training state" in result.stderr
