"""Bytes from elsewhere pass one gate, and every command that reads them has one budget.

Part one feeds the shapes a name can hide (a FIFO, a link to /dev/zero, a sparse 300 MB file,
a link out of the directory, a directory) to every reader of untrusted bytes, through the real
CLI: diff of snapshots, of locks and of checkpoint directories, apply --from-snapshot, inspect
of each checkpoint format and member kind (DCP .metadata and shards included), cache restore
and check on a polluted METADATA. Each must end with exit 2 or 3 and a one-line reason, no
traceback. Part two is the hostile budget corpus (cheap pickle opcodes, a safetensors header of
empty tensors, directories of them, a 50 MB `Version:`), run under RLIMIT_AS and RLIMIT_CPU:
each is refused naming its budget. The subprocess timeouts only detect hangs; nothing asserts
on time. Hostile files are made in tmp_path, sparse where size is the point.
"""

from __future__ import annotations

import ast
import json
import os
import resource
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from envlock.agent import core as agent_core
from envlock.agent import probe as agent_probe
from envlock.base import limits
from envlock.errors import EnvlockError
from tests.conftest import run_envlock
from tests.hostile_checkpoints.assemble import PROTO, safetensors, state_dict, tensor, zipped
from tests.projects import write_seed_project
from tests.wheelhouse import build_wheelhouse

REPO = Path(__file__).resolve().parents[2]
HANG = 300  # seconds: a run still going then is a hang (a FIFO read blocks forever)
SPARSE = 300 * 10**6
ADDRESS_SPACE = 2 * 2**30  # RLIMIT_AS of each budget run
CPU_SECONDS = 120  # RLIMIT_CPU of each budget run: a runaway is killed, never waited for
Shape = Callable[[Path, Path], None]


# --- the shapes ---------------------------------------------------------------------------------


def fifo(path: Path, valid: Path) -> None:
    os.mkfifo(path)


def dev_zero(path: Path, valid: Path) -> None:
    """A link to a zero device of the test's own (never the host's /dev/zero: a regressed
    write through the link must not reach the machine's device)."""
    own = Path(tempfile.mkdtemp(prefix="envlock-test-device-")) / "zero"
    os.mknod(own, stat.S_IFCHR | 0o666, os.makedev(1, 5))
    path.symlink_to(own)


def sparse(path: Path, valid: Path) -> None:
    with open(path, "wb") as f:
        f.truncate(SPARSE)


def link_out(path: Path, valid: Path) -> None:
    # A valid file of the same kind outside the directory: only where it lies is wrong.
    outside = path.parent.parent / f"outside-{path.parent.name}-{path.name}"
    shutil.copyfile(valid, outside)
    path.symlink_to(outside)


def directory(path: Path, valid: Path) -> None:
    path.mkdir()


SHAPES: dict[str, Shape] = {
    "fifo": fifo,
    "dev_zero": dev_zero,
    "sparse": sparse,
    "link_out": link_out,
    "directory": directory,
}


def shaped(tmp: Path, name: str, shape: str, valid: Path) -> Path:
    """`tmp/case/name` made in `shape`; the directory `tmp/case` holding it."""
    case = tmp / "case"
    case.mkdir(parents=True, exist_ok=True)
    SHAPES[shape](case / name, valid)
    return case


# What the reason must say for each shape: what the file is, not "no such file" or "corrupt".
REASONS = {
    "fifo": ("refusing: ", "is a FIFO, not a regular file"),
    "dev_zero": ("refusing: ", "is a character device, not a regular file"),
    "sparse": ("refusing: ", " exceeds "),
    "link_out": ("refusing: ", "is a link out of", "--follow-links"),
    "directory": ("refusing: ", "is a directory, not a regular file"),
}


def assert_reasoned(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2 or 3 with a one-line reason saying `words` (a hint may follow), no traceback."""
    assert result.returncode in (2, 3), (result.returncode, result.stdout[-2000:], result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines[0]) < 2000 and all(line.startswith("  hint: ") for line in lines[1:]), lines
    for word in words:
        assert word in result.stderr, result.stderr


def cli(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG,
        env=env,
        cwd=cwd,
    )


# --- a real applied environment and its snapshot, shared by the module -------------------------


class Env:
    def __init__(self, work: Path) -> None:
        self.work = work
        self.profile = write_seed_project(work / "p", build_wheelhouse(work / "wheelhouse"))
        for args in (("lock", self.profile), ("apply", "-y", self.profile)):
            result = run_envlock(*args)
            assert result.returncode == 0, result.stderr
        made = run_envlock("snapshot", self.profile, work / "valid")
        assert made.returncode == 0, made.stderr
        self.snapshot = work / "valid" / "envlock-snapshot.json"
        self.lock = next((work / "p").glob("pylock.*.toml"))
        root = work / "p" / "root" / "current"
        self.site = next(root.glob("lib/python3*/site-packages"))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    return Env(tmp_path_factory.mktemp("gate"))


def valid_files(tmp: Path) -> dict[str, Path]:
    """One valid file of each checkpoint member kind, to copy or link to."""
    made = tmp / "valid"
    made.mkdir(exist_ok=True)
    (made / "raw.pkl").write_bytes(PROTO + state_dict({"step": b"K\x03"}) + b".")
    (made / "config.json").write_text(json.dumps({"hidden_size": 64}))
    index = {"weight_map": {"w": "model.safetensors"}}
    (made / "model.safetensors.index.json").write_text(json.dumps(index))
    return {
        "model.safetensors": safetensors(made / "model.safetensors", {"w": ("F32", [2], 8)}),
        "model.pt": zipped(made / "model.pt", PROTO + state_dict({"w": tensor()}) + b"."),
        "raw.pkl": made / "raw.pkl",
        "training_args.bin": made / "raw.pkl",
        "custom_checkpoint_0.pkl": made / "raw.pkl",
        "config.json": made / "config.json",
        "model.safetensors.index.json": made / "model.safetensors.index.json",
    }


# --- part one: every reader, every shape --------------------------------------------------------
# Left out, as main already bounded them (covered by test_hostile_inspect.py): a sparse torch
# zip, safetensors, raw pickle or index (16 bytes sniffed, headers and pickles capped), and a
# directory given where a file is expected on the command line (read as a directory side, or
# refused by click). A file named on the command line may be a link anywhere: the user chose it.

FILE_SHAPES = ["fifo", "dev_zero"]
MEMBER_SHAPES = ["fifo", "dev_zero", "link_out", "directory"]


@pytest.mark.parametrize("shape", [*FILE_SHAPES, "sparse"])
def test_diff_of_snapshot_files(env: Env, tmp_path: Path, shape: str) -> None:
    case = shaped(tmp_path, "a.json", shape, env.snapshot)
    assert_reasoned(cli("diff", case / "a.json", env.snapshot), *REASONS[shape])


@pytest.mark.parametrize("shape", list(SHAPES))
def test_diff_of_snapshot_dirs(env: Env, tmp_path: Path, shape: str) -> None:
    case = shaped(tmp_path, "envlock-snapshot.json", shape, env.snapshot)
    assert_reasoned(cli("diff", case, env.snapshot.parent), *REASONS[shape])


def test_diff_follows_a_snapshot_link_when_asked(env: Env, tmp_path: Path) -> None:
    case = shaped(tmp_path, "envlock-snapshot.json", "link_out", env.snapshot)
    result = cli("diff", "--follow-links", case, env.snapshot.parent)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("shape", [*FILE_SHAPES, "sparse"])
def test_diff_of_locks(env: Env, tmp_path: Path, shape: str) -> None:
    case = shaped(tmp_path, "pylock.seed.toml", shape, env.lock)
    assert_reasoned(cli("diff", case / "pylock.seed.toml", env.lock), *REASONS[shape])


@pytest.mark.parametrize(
    "member", ["config.json", "model.safetensors", "training_args.bin", "custom_checkpoint_0.pkl"]
)
@pytest.mark.parametrize("shape", MEMBER_SHAPES)
def test_diff_of_checkpoint_dirs(tmp_path: Path, shape: str, member: str) -> None:
    valid = valid_files(tmp_path)
    case = shaped(tmp_path, member, shape, valid[member])
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(valid[member], other / member)
    assert_reasoned(cli("diff", case, other), *REASONS[shape])


@pytest.mark.parametrize("shape", list(SHAPES))
def test_apply_from_snapshot(env: Env, tmp_path: Path, shape: str) -> None:
    case = shaped(tmp_path, "envlock-snapshot.json", shape, env.snapshot)
    result = cli("apply", "-y", "--from-snapshot", case, env.profile)
    assert_reasoned(result, *REASONS[shape][:2])  # no --follow-links on apply: pass the file


@pytest.mark.parametrize("kind", ["model.safetensors", "model.pt", "raw.pkl", "x.index.json"])
@pytest.mark.parametrize("shape", FILE_SHAPES)
def test_inspect_of_a_file(tmp_path: Path, shape: str, kind: str) -> None:
    valid = valid_files(tmp_path)
    case = shaped(tmp_path, kind, shape, valid.get(kind, valid["model.safetensors.index.json"]))
    assert_reasoned(cli("inspect", case / kind), *REASONS[shape])


@pytest.mark.parametrize("member", ["model.safetensors", "model.pt", "raw.pkl"])
@pytest.mark.parametrize("shape", ["fifo", "directory"])
def test_inspect_of_a_directory_member(tmp_path: Path, shape: str, member: str) -> None:
    valid = valid_files(tmp_path)
    case = shaped(tmp_path, member, shape, valid[member])
    assert_reasoned(cli("inspect", case), *REASONS[shape])


def test_inspect_names_the_device_a_member_links_to(tmp_path: Path) -> None:
    # A link to /dev/zero leads out of the directory: skipped, and the option named; followed,
    # it is refused for what it is.
    case = shaped(tmp_path, "model.safetensors", "dev_zero", tmp_path)
    assert_reasoned(cli("inspect", case), "--follow-links")
    assert_reasoned(cli("inspect", "--follow-links", case), *REASONS["dev_zero"])


@pytest.mark.parametrize("shape", ["fifo", "directory"])  # links out: refused on main too
def test_inspect_of_an_index_shard(tmp_path: Path, shape: str) -> None:
    valid = valid_files(tmp_path)
    case = shaped(tmp_path, "model.safetensors", shape, valid["model.safetensors"])
    shutil.copyfile(valid["model.safetensors.index.json"], case / "model.safetensors.index.json")
    assert_reasoned(cli("inspect", case / "model.safetensors.index.json"), *REASONS[shape])


@pytest.fixture(scope="module")
def dcp_valid(torch_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch.distributed.checkpoint directory, written by torch in one process."""
    made = tmp_path_factory.mktemp("dcp") / "valid"
    script = (
        "import sys, torch, torch.distributed.checkpoint as dcp\n"
        "dcp.save({'w': torch.zeros(4), 'step': 3}, checkpoint_id=sys.argv[1])\n"
    )
    subprocess.run([str(torch_python), "-c", script, str(made)], check=True, timeout=HANG)
    return made


@pytest.mark.parametrize(
    "member, shape",
    # A sparse .metadata: the pickle's size limit refused it on main too.
    [(m, s) for m in (".metadata", "__0_0.distcp") for s in MEMBER_SHAPES],
)
def test_inspect_of_dcp_members(dcp_valid: Path, tmp_path: Path, shape: str, member: str) -> None:
    case = tmp_path / "case"
    shutil.copytree(dcp_valid, case)
    (case / member).unlink()
    SHAPES[shape](case / member, dcp_valid / member)
    assert_reasoned(cli("inspect", case), *REASONS[shape])


def test_dcp_metadata_linking_out_is_read_only_when_asked(dcp_valid: Path, tmp_path: Path) -> None:
    case = tmp_path / "case"
    shutil.copytree(dcp_valid, case)
    (case / ".metadata").unlink()
    link_out(case / ".metadata", dcp_valid / ".metadata")
    assert_reasoned(cli("inspect", case), *REASONS["link_out"])
    followed = cli("inspect", "--json", "--follow-links", case)
    assert followed.returncode == 0, followed.stderr
    assert json.loads(followed.stdout)["tensors"]["count"] == 1


@pytest.mark.parametrize("shape", FILE_SHAPES)
def test_cache_restore_of_an_archive(env: Env, tmp_path: Path, shape: str) -> None:
    case = shaped(tmp_path, "cache.tar.gz", shape, env.snapshot)
    result = cli("cache", env.profile, "restore", case / "cache.tar.gz")
    assert_reasoned(result, *REASONS[shape])


def polluted(env: Env, name: str) -> Path:
    """A planted distribution in the active generation, removed by the caller."""
    dist = env.site / f"{name}-1.0.dist-info"
    dist.mkdir()
    return dist / "METADATA"


@pytest.mark.parametrize("shape", ["fifo", "dev_zero", "sparse", "directory"])
def test_check_on_a_polluted_metadata(env: Env, shape: str) -> None:
    metadata = polluted(env, f"planted_{shape}")
    try:
        SHAPES[shape](metadata, metadata)
        reason = {"sparse": "the METADATA headers read exceed"}.get(shape, REASONS[shape][1])
        assert_reasoned(cli("check", env.profile), "refusing: ", "METADATA", reason)
    finally:
        shutil.rmtree(metadata.parent)


# --- one gate, the agent's: envlock's reads say its verdicts with envlock's errors ----------------
def verdict(
    open_file: Callable[[], object],
    errors: tuple[type[Exception], ...] = (EnvlockError, agent_core.AgentError),
) -> str:
    try:
        handle = open_file()
    except errors as exc:
        text = str(exc)
        for word in ("not a regular file", "link out", "exceeds"):
            if word in text:
                return word
        return text
    handle.close()  # type: ignore[attr-defined]
    return "read"


@pytest.mark.parametrize("shape", list(SHAPES))
def test_envlocks_gate_is_the_agents_in_envlocks_words(tmp_path: Path, shape: str) -> None:
    """The same verdict either way in; through envlock's open_untrusted, an envlock error
    (an AgentError leaking out would fail here)."""
    from envlock.base.untrusted import (
        open_untrusted,  # here: the rest of the module runs on main too
    )

    valid = tmp_path / "valid.json"
    valid.write_text("{}")
    case = shaped(tmp_path, "f.json", shape, valid)
    path = case / "f.json"
    limit = limits.MAX_BYTES["json"]
    ours = verdict(lambda: open_untrusted(path, "json", within=case), (EnvlockError,))
    theirs = verdict(lambda: agent_core.open_untrusted(str(path), limit, str(case)))
    assert ours == theirs != "read"
    assert verdict(lambda: open_untrusted(valid, "json", within=tmp_path)) == "read"
    assert verdict(lambda: agent_core.open_untrusted(str(valid), limit, str(tmp_path))) == "read"


def test_the_agents_limits_are_envlocks() -> None:
    assert agent_probe.MAX_ENV_TEXT == limits.MAX_ENV_TEXT
    assert agent_probe.MAX_ENV_HEADER == limits.MAX_ENV_HEADER
    assert agent_probe.MAX_ENV_HEADERS == limits.MAX_ENV_HEADERS


# Readers of untrusted bytes open files only through the gate: no other open in them.
READERS = [
    *sorted((REPO / "envlock" / "checkpoint").glob("*.py")),
    REPO / "envlock" / "runs" / "snapshot_file.py",
    REPO / "envlock" / "runs" / "diff.py",
    REPO / "envlock" / "runs" / "cache.py",
]
_OPENS = {"open", "read_text", "read_bytes", "read", "ZipFile", "loads_file"}
_READ_FROM = ("f", "archive", "member", "zipfile", "json", "pickled", "self.pickled")


def test_readers_open_nothing_but_through_the_gate() -> None:
    found = []
    for path in READERS:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            receiver = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
            # Reads of what the gate opened (f, handle), of a zip member, of bytes in memory
            # (`pickled`: the pickle folding.py reads, its bytes read through the gate).
            if name in _OPENS and receiver not in _READ_FROM:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
            if name == "ZipFile" and not (node.args and ast.unparse(node.args[0]) == "f"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "\n".join(found)
    probe = ast.parse((REPO / "envlock" / "agent" / "probe.py").read_text())
    reader = next(
        n
        for n in ast.walk(probe)
        if isinstance(n, ast.FunctionDef) and n.name == "metadata_headers"
    )
    calls = {ast.unparse(n.func) for n in ast.walk(reader) if isinstance(n, ast.Call)}
    assert "open_untrusted" in calls and "open" not in calls


# --- part two: budgets, under setrlimit ---------------------------------------------------------


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def capped(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "envlock", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=HANG,
        env=env,
        preexec_fn=_limits,
    )


def assert_refused(result: subprocess.CompletedProcess[str], budget: str) -> None:
    assert result.returncode == 3, (result.returncode, result.stdout[-2000:], result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert "refusing: " in result.stderr and " exceeds " in result.stderr, result.stderr
    assert budget in result.stderr, result.stderr


def cheap_opcodes(path: Path, n: int) -> Path:
    """A raw pickle of one list of `n` small ints: two bytes an opcode, each one object."""
    path.write_bytes(PROTO + b"](" + b"K\x01" * n + b"e.")
    return path


def empty_tensors(path: Path, n: int) -> Path:
    """A safetensors file whose header lists `n` empty tensors and nothing else."""
    spec = b'{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'
    header = b"{" + b",".join(b'"t%d":%s' % (i, spec) for i in range(n)) + b"}"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def test_many_cheap_opcodes_are_refused(tmp_path: Path) -> None:
    pkl = cheap_opcodes(tmp_path / "cheap.pkl", 6_000_000)
    assert_refused(capped("inspect", pkl), "budget of 5,000,000 pickle opcodes")


def test_a_directory_of_pickles_shares_one_budget(tmp_path: Path) -> None:
    for i in range(4):  # each under the budget, together past it
        cheap_opcodes(tmp_path / f"part{i}.pkl", 1_500_000)
    assert_refused(capped("inspect", tmp_path), "budget of 5,000,000 pickle opcodes")


def test_both_sides_of_a_diff_share_one_budget(tmp_path: Path) -> None:
    sides = [tmp_path / "a", tmp_path / "b"]
    for side in sides:
        side.mkdir()
        cheap_opcodes(side / "custom_checkpoint_0.pkl", 3_000_000)
    assert_refused(capped("diff", *sides), "budget of 5,000,000 pickle opcodes")


def test_a_header_of_empty_tensors_is_refused(tmp_path: Path) -> None:
    header = empty_tensors(tmp_path / "empty.safetensors", 300_000)
    assert_refused(capped("inspect", "--json", header), "250,000 a file")


def test_a_directory_of_tensor_headers_shares_one_budget(tmp_path: Path) -> None:
    for i in range(3):
        empty_tensors(tmp_path / f"part{i}.safetensors", 200_000)
    assert_refused(capped("inspect", "--json", tmp_path), "budget of 500,000 tensors")


def test_json_lists_are_cut(tmp_path: Path) -> None:
    # 60,000 empty tensors share one storage: its list of keys is cut, and the cut is said.
    header = empty_tensors(tmp_path / "shared.safetensors", 60_000)
    result = capped("inspect", "--json", header)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert all(len(s["keys"]) <= 50_000 for s in data["shared_storage"])
    assert any("50,000 of 60,000 entries shown" in note for note in data["notes"])
    assert limits.MAX_JSON_ENTRIES == 50_000  # the README's figure


def test_a_huge_version_is_refused_in_the_probe(env: Env) -> None:
    metadata = polluted(env, "huge_version")
    try:
        metadata.write_bytes(b"Metadata-Version: 2.1\nName: huge-version\nVersion: ")
        with open(metadata, "ab") as f:
            f.write(b"1" * 50 * 10**6 + b"\n\n")
        result = subprocess.run(
            [sys.executable, "-m", "envlock", "check", str(env.profile)],
            capture_output=True,
            text=True,
            timeout=HANG,
            env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)},
            preexec_fn=_limits,
        )
        assert_refused(result, "exceeds 4096 characters")
        assert len(result.stdout) + len(result.stderr) < 10_000  # the value never came back
    finally:
        shutil.rmtree(metadata.parent)
