"""The agent's probe in-process, on real trees in a temp dir: what it reads of METADATA
(bounded), torch's build from metadata and version.py, the compile-cache key and warmth, the
venv link, uv's sidecar, scripts, the hold, and one whole probe of a root. Seconds.

The probe normally runs shipped, inside the environment's interpreter (test_converge.py and
the remote suites); here the same functions are called directly, so each rule is pinned.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envlock.agent import probe as agent_probe
from envlock.agent.core import GENERATION, HOLD, LOCK_COPY, AgentError
from envlock.agent.files import write_manifest
from envlock.agent.probe import (
    MAX_ENV_HEADER,
    MAX_ENV_TEXT,
    cache_fingerprint,
    cache_state,
    generation_facts,
    hold_state,
    installed_distributions,
    interpreter_facts,
    link_state,
    local_label,
    metadata_headers,
    probe,
    read_text,
    refused_interpreter,
    remember_warmth,
    required_cuda_majors,
    scripts_state,
    torch_build,
    uv_state,
    version_py,
)

SITE = "lib/python3.11/site-packages"
HASH = "0123456789ab"


def dist(site: Path, name: str, version: str, *requires: str, extra: str = "") -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n" + extra + "\nName: not-a-header\n")


def version_file(site: Path, text: str) -> None:
    (site / "torch").mkdir(parents=True, exist_ok=True)
    (site / "torch" / "version.py").write_text(text)


# -- METADATA, bounded ------------------------------------------------------------------------
def test_metadata_headers_are_read_up_to_the_first_blank_line(tmp_path: Path) -> None:
    path = tmp_path / "METADATA"
    path.write_text(
        "Metadata-Version: 2.1\nName: Foo.Bar\nVersion: 1.0\nRequires-Dist: a>=1\n"
        " continued: x\nRequires-Dist: b ; extra == 'x'\nSummary: " + "s" * 10_000 + "\n"
        "\nVersion: 9\n"
    )
    assert metadata_headers(path) == {
        "name": ["Foo.Bar"],
        "version": ["1.0"],
        "requires-dist": ["a>=1", "b ; extra == 'x'"],
    }
    with pytest.raises(AgentError, match="its Summary value of more than"):
        metadata_headers(path, wanted=("summary",))  # the long line, when it is wanted
    assert metadata_headers(tmp_path / "missing") == {}


def test_a_wanted_value_past_its_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "METADATA"
    path.write_text("Name: " + "n" * (MAX_ENV_TEXT + 1) + "\n")
    with pytest.raises(AgentError, match=f"its Name value of more than {MAX_ENV_TEXT} char"):
        metadata_headers(path)
    path.write_text("Name: " + "n" * MAX_ENV_TEXT + "\n")
    assert metadata_headers(path)["name"] == ["n" * MAX_ENV_TEXT]
    path.write_text("Name: " + "n" * (MAX_ENV_TEXT + 100) + "\n")  # longer than a chunk
    with pytest.raises(AgentError) as info:
        metadata_headers(path)
    assert info.value.kind == "unsafe"


def test_a_header_part_past_its_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "METADATA"
    line = "X-Filler: " + "f" * 1000 + "\n"
    path.write_text(line * (MAX_ENV_HEADER // len(line) + 1))
    with pytest.raises(AgentError, match=f"headers read exceed {MAX_ENV_HEADER} bytes"):
        metadata_headers(path)


def test_installed_distributions_by_canonical_name(tmp_path: Path) -> None:
    site = tmp_path / SITE
    dist(site, "Foo_Bar", "1.0", "numpy>=2")
    dist(site, "torch", "2.11.0+cu128")
    (site / "nameless-1.0.dist-info").mkdir()
    (site / "unversioned-1.0.dist-info").mkdir()
    (site / "unversioned-1.0.dist-info" / "METADATA").write_text("Name: unversioned\n")
    (site / "pkg").mkdir()
    found = installed_distributions(site)
    assert found == {
        "foo-bar": {"version": "1.0", "requires": ["numpy>=2"]},
        "unversioned": {"version": "", "requires": []},
        "torch": {"version": "2.11.0+cu128", "requires": []},
    }
    assert installed_distributions(tmp_path / "none") == {}


# -- torch's build ------------------------------------------------------------------------------
def test_torch_s_label_from_its_version_or_from_version_py(tmp_path: Path) -> None:
    site = tmp_path / SITE
    assert torch_build({}, site) is None
    dists = {"torch": {"version": "2.11.0", "requires": ["nvidia-cudnn-cu13==9.19"]}}
    version_file(
        site,
        "__version__: str = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip = None\n"
        'git_version = "abc"\n',
    )
    assert torch_build(dists, site) == {
        "version": "2.11.0",
        "local": "cu130",
        "reported": "2.11.0+cu130",
        "cuda": "13.0",
        "hip": None,
        "git_version": "abc",
        "cuda_requires": ["cu13"],
    }
    labelled = {"torch": {"version": "2.11.0+cu128", "requires": []}}
    assert torch_build(labelled, site)["local"] == "cu128"  # type: ignore[index]
    assert version_py(tmp_path / "none.py") == {}
    assert local_label("2.1.0") is None and local_label("2.1.0+cpu+x") == "cpu+x"


@pytest.mark.parametrize(
    ("requires", "majors"),
    [
        (["nvidia-cudnn-cu12==9.1", "nvidia-nccl-cu12"], {"12"}),
        (["nvidia-cutlass-dsl-libs-cu13==4.8"], set()),  # not torch's own family
        (["nvidia-cublas==13.1.0.3"], {"13"}),  # unsuffixed, toolkit-versioned
        (["nvidia-cufft==12.0.0.61"], set()),  # unsuffixed, its own versions
        (["cuda-toolkit[cublas]==13.0.2"], {"13"}),
        (["cuda-bindings>=13.0.3,<14"], {"13"}),
        (["cuda-bindings~=12.9"], {"12"}),
        (["cuda-bindings===12.9.4"], {"12"}),
        (["cuda-bindings<14"], set()),
        (["nvidia-cudnn-cu13 ; extra == 'cuda'"], set()),  # an optional extra
        (["nvidia-cudnn-cu12 ; platform_system == 'Linux'"], {"12"}),
        (["Nvidia_Cudnn_Cu12"], {"12"}),
        (["numpy>=2", "!!"], set()),
        # one requirement skipped, the next still read
        (["nvidia-cudnn-cu13 ; extra == 'x'", "nvidia-cudnn-cu12"], {"12"}),
        (["!!", "nvidia-cudnn-cu12"], {"12"}),
        (["nvidia-cutlass-dsl-libs-cu13", "nvidia-cudnn-cu12"], {"12"}),
        (["nvidia-cudnn-cu12", "cuda-bindings<14", "nvidia-cublas==13.1"], {"12", "13"}),
        (["foobar-cublas==13.1"], set()),  # not nvidia's
    ],
)
def test_required_cuda_majors(requires: list[str], majors: set[str]) -> None:
    assert required_cuda_majors(requires) == majors


# -- the compile cache --------------------------------------------------------------------------
def test_the_cache_key_names_torch_triton_cuda_and_gpus() -> None:
    assert cache_fingerprint(None, {}, {}) is None
    torch = {"version": "2.11.0+cu128", "cuda": "12.8"}
    gpus = {"gpus": [{"name": "H200", "capability": "9.0"}, {"name": "H200", "capability": "9.0"}]}
    key = cache_fingerprint(torch, {"triton": {"version": "3.2"}}, gpus)
    assert key is not None and key["parts"] == {
        "torch": "2.11.0+cu128",
        "triton": "3.2",
        "cuda": "12.8",
        "gpus": ["H200 sm90"],
    }
    assert key["id"].startswith("torch-2.11.0+cu128-") and len(key["id"]) == 29
    # The id names cache dirs already on disk: its hash is of the parts in sorted order.
    text = json.dumps(dict(sorted(key["parts"].items())))
    assert key["id"] == "torch-2.11.0+cu128-" + hashlib.sha256(text.encode()).hexdigest()[:10]
    rocm = cache_fingerprint(
        {"version": "2.1 X/y", "hip": "6.2"}, {"pytorch-triton": {"version": "1"}}, {}
    )
    assert rocm is not None and rocm["id"].startswith("torch-2.1_X_y-")
    assert (rocm["parts"]["cuda"], rocm["parts"]["triton"]) == ("6.2", "1")
    other = cache_fingerprint(torch, {"triton": {"version": "3.3"}}, gpus)
    assert other is not None and other["id"] != key["id"]


def test_the_cache_dir_its_warmth_and_what_was_seen(tmp_path: Path) -> None:
    key = {"id": "torch-x", "parts": {}}
    assert cache_state(None, key) is None and cache_state(str(tmp_path), None) is None
    assert cache_state(str(tmp_path), key) == {
        "dir": f"{tmp_path}/torch-x",
        "fingerprint": key,
        "exists": False,
    }
    (tmp_path / "torch-x" / "sub").mkdir(parents=True)
    assert cache_state(str(tmp_path), key)["files"] == 0  # type: ignore[index]
    empty = cache_state(str(tmp_path), key, full=True)
    assert empty is not None and (empty["files"], empty["bytes"], empty["last_used"]) == (
        0,
        0,
        None,
    )
    (tmp_path / "torch-x" / "sub" / "a").write_bytes(b"12345")
    (tmp_path / "torch-x" / "b").write_bytes(b"12")
    os.utime(tmp_path / "torch-x" / "b", (100, 100))
    os.utime(tmp_path / "torch-x" / "sub" / "a", (200, 200))
    assert cache_state(str(tmp_path), key)["files"] == 1  # type: ignore[index]
    full = cache_state(str(tmp_path), key, full=True)
    assert full is not None and (full["files"], full["bytes"], full["last_used"]) == (2, 7, 200.0)
    root = tmp_path / "root"
    root.mkdir()
    remember_warmth(str(root), None)
    cache: dict[str, Any] = {"fingerprint": key, "files": 0}
    remember_warmth(str(root), cache)
    assert cache["was_warm"] is False and not (root / "cache-seen.json").exists()
    cache = {"fingerprint": key, "files": 1}
    remember_warmth(str(root), cache)
    assert cache["was_warm"] is False
    assert list(json.loads((root / "cache-seen.json").read_text())) == ["torch-x"]
    cache = {"fingerprint": key, "files": 0}
    remember_warmth(str(root), cache)
    assert cache["was_warm"] is True  # it held files once: now it went cold
    cache = {"fingerprint": {"id": "torch-y"}, "files": 0}
    remember_warmth(str(root), cache)
    assert cache["was_warm"] is False  # another build's cache: never warm
    remember_warmth(str(root), {"fingerprint": {"id": "torch-a"}, "files": 3})
    text = (root / "cache-seen.json").read_text()
    seen = json.loads(text)
    assert list(seen) == ["torch-a", "torch-x"] and text.index("torch-a") < text.index("torch-x")
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", t) for t in seen.values())


# -- links, uv, scripts, the hold ----------------------------------------------------------------
def test_the_venv_link(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    assert link_state(None, "/r") is None
    assert link_state(str(venv), "/r") == {"kind": "absent"}
    venv.write_text("")
    assert link_state(str(venv), "/r") == {"kind": "file"}
    venv.unlink()
    venv.mkdir()
    assert link_state(str(venv), "/r") == {"kind": "directory", "venv": False}
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a real venv: `apply --adopt`'s
    assert link_state(str(venv), "/r") == {"kind": "directory", "venv": True}
    (venv / "pyvenv.cfg").unlink()
    venv.rmdir()
    venv.symlink_to("/r/current")
    assert link_state(str(venv), "/r") == {"kind": "symlink", "target": "/r/current"}


def test_uv_is_the_pushed_one_only_by_its_record(tmp_path: Path) -> None:
    uv = tmp_path / "uv"
    spec = {"path": str(uv), "version": "0.13.0"}
    assert uv_state(None) is None
    assert uv_state(spec) == {"present": False, "ok": False}
    uv.write_bytes(b"binary")
    st = uv.stat()
    record = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "version": "0.13.0"}
    (tmp_path / "uv.json").write_text(json.dumps(record))
    assert uv_state(spec) == {"present": True, "ok": True, "version": "0.13.0"}
    assert uv_state({**spec, "version": "0.14.0"}) == {
        "present": True,
        "ok": False,
        "version": "0.13.0",
    }
    os.utime(uv, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # same size, touched
    assert uv_state(spec)["ok"] is False  # type: ignore[index]
    os.utime(uv, ns=(st.st_atime_ns, st.st_mtime_ns))
    uv.write_bytes(b"binarY")
    os.utime(uv, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert uv_state(spec)["ok"] is True  # the record is of size and time only
    uv.write_bytes(b"another binary")
    os.utime(uv, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert uv_state(spec)["ok"] is False  # type: ignore[index]


def test_scripts_hold_and_text(tmp_path: Path) -> None:
    assert scripts_state(None) is None
    (tmp_path / "a.py").write_text("x")
    found = scripts_state({"dest": str(tmp_path), "files": ["a.py", "b.py"]})
    assert found == {
        "dest": str(tmp_path),
        "hashes": {
            "a.py": "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881",
            "b.py": None,
        },
    }
    assert hold_state(str(tmp_path), "1-x") is None
    (tmp_path / HOLD).write_text(json.dumps({"generation": "1-x", "from": "2-y"}))
    assert hold_state(str(tmp_path), "1-x") == {"generation": "1-x", "from": "2-y"}
    assert hold_state(str(tmp_path), "2-y") is None
    (tmp_path / HOLD).write_text("[]")
    assert hold_state(str(tmp_path), "1-x") is None
    assert read_text(str(tmp_path / "a.py")) == "x" and read_text(str(tmp_path / "no")) is None


def test_a_python_planted_inside_the_root_is_refused(tmp_path: Path) -> None:
    bin_dir = tmp_path / "generations" / f"1-{HASH}" / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "current").symlink_to(f"generations/1-{HASH}")
    assert refused_interpreter(str(tmp_path)) is None  # no python at all
    (bin_dir / "python").symlink_to(sys.executable)
    assert refused_interpreter(str(tmp_path)) is None  # a venv's link out of the root
    (bin_dir / "python").unlink()
    (bin_dir / "python").write_text("planted")
    assert refused_interpreter(str(tmp_path)) == str(bin_dir / "python")


# -- a generation and a whole probe -------------------------------------------------------------
def test_a_generation_s_packages_torch_and_cache_key(tmp_path: Path) -> None:
    gen = tmp_path / "gen"
    site = gen / SITE
    dist(site, "torch", "2.11.0+cu128", "nvidia-cudnn-cu12==9.1")
    dist(site, "numpy", "2.1.0")
    version_file(site, "__version__ = '2.11.0+cu128'\ncuda = '12.8'\n")
    facts = generation_facts(str(gen), {})
    assert facts["packages"] == {"torch": "2.11.0+cu128", "numpy": "2.1.0"}
    assert facts["torch"]["cuda_requires"] == ["cu12"] and facts["torch"]["cuda"] == "12.8"
    assert facts["fingerprint"]["parts"]["torch"] == "2.11.0+cu128"


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    for n, complete in ((1, True), (2, False)):
        gen = root / "generations" / f"{n}-{HASH}"
        (gen / ".envlock").mkdir(parents=True)
        if complete:
            (gen / GENERATION).write_text(json.dumps({"number": n}))
            (gen / LOCK_COPY).write_text("the lock")
    (root / "generations" / "stray").mkdir()
    (root / "current").symlink_to(f"generations/1-{HASH}")
    (root / "history.jsonl").write_text(json.dumps({"to": f"1-{HASH}"}) + "\n")
    os.chmod(root, 0o755)
    return root


def test_a_whole_probe_of_a_root(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (tmp_path / "venv").symlink_to(root / "current")
    state = probe(
        {
            "root": str(root),
            "venv": str(tmp_path / "venv"),
            "cache_dir": None,
            "scripts": {"dest": str(tmp_path), "files": []},
            "uv": None,
        }
    )
    assert state["agent"] == 1 and state["root_exists"] is True
    assert [(g["name"], g["complete"]) for g in state["generations"]] == [
        (f"1-{HASH}", True),
        (f"2-{HASH}", False),
    ]
    assert state["current"] == f"1-{HASH}" and state["hold"] is None
    assert state["history"] == [{"to": f"1-{HASH}"}]
    assert state["venv_link"] == {"kind": "symlink", "target": str(root / "current")}
    assert state["trust"] == {"root": None, "cache_dir": None}
    assert state["in_generation"] is False and "packages" not in state  # pytest's python
    assert "active_lock" not in state and state["uv"] is None
    assert state["scripts"] == {"dest": str(tmp_path), "hashes": {}}
    assert state["python"]["version"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert state["python"]["in_venv"] == (sys.prefix != sys.base_prefix)
    assert state["python"]["refused"] is None  # pytest's python is not inside the root
    assert state["root_fingerprint"] and state["hostname"] == os.uname().nodename
    # Asked for (or held), the active generation's own lock comes back.
    asked = probe({"root": str(root), "active_lock": True})
    assert asked["active_lock"] == "the lock" and asked["venv_link"] is None
    (root / HOLD).write_text(json.dumps({"generation": f"1-{HASH}"}))
    held = probe({"root": str(root)})
    assert held["hold"] == {"generation": f"1-{HASH}"} and held["active_lock"] == "the lock"
    assert held["root_fingerprint"] != state["root_fingerprint"]


def test_a_root_another_user_may_write_is_not_read(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / HOLD).write_text(json.dumps({"generation": f"1-{HASH}"}))  # not read either
    os.chmod(root, 0o777)
    state = probe({"root": str(root)})
    assert state["trust"]["root"] and "writable" in state["trust"]["root"]
    assert (state["generations"], state["current"], state["history"]) == ([], None, [])
    assert state["hold"] is None


def test_the_probe_registers_itself() -> None:
    assert agent_probe.COMMANDS["probe"] is probe


def test_a_probe_inside_the_active_generation_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe as it runs shipped: in the active generation's interpreter (its prefix is
    the generation, as pythons.py starts it), so packages, torch, files and cache are read."""
    root = make_root(tmp_path)
    gen = root / "generations" / f"1-{HASH}"
    site = gen / SITE
    dist(site, "torch", "2.11.0+cu128", "nvidia-cudnn-cu12==9.1")
    version_file(site, "__version__ = '2.11.0+cu128'\ncuda = '12.8'\n")
    (gen / "pyvenv.cfg").write_text("home = /usr/bin\n")
    write_manifest(str(gen))
    (site / "torch" / "version.py").write_text("tampered")
    monkeypatch.setattr(sys, "prefix", str(gen))
    monkeypatch.setattr(sys, "base_prefix", "/usr")
    cache = tmp_path / "cache"
    request = {"root": str(root), "cache_dir": str(cache), "deep": True}
    state = probe(request)
    assert state["in_generation"] is True and state["python"]["in_venv"] is True
    assert state["packages"] == {"torch": "2.11.0+cu128"}
    assert state["torch"]["cuda_requires"] == ["cu12"] and "cuda" not in state["torch"]
    assert state["fingerprint"]["id"].startswith("torch-2.11.0+cu128-")
    assert [m["path"] for m in state["files"]["modified"]] == [f"{SITE}/torch/version.py"]
    key = state["fingerprint"]["id"]
    assert state["cache"] == {
        "dir": f"{cache}/{key}",
        "fingerprint": state["fingerprint"],
        "exists": False,
        "was_warm": False,
    }
    (cache / key).mkdir(parents=True)
    (cache / key / "f").write_text("x")
    assert "bytes" not in probe({**request, "verify": False})["cache"]  # counted only if asked
    warm = probe({**request, "warmth": True, "verify": False})
    assert "files" not in warm and warm["cache"]["files"] == 1 and warm["cache"]["bytes"] == 1
    assert json.loads((root / "cache-seen.json").read_text()).keys() == {key}
    # Another root's generation, or none active: the probe does not read it as its own.
    monkeypatch.setattr(sys, "prefix", str(root / "generations" / f"2-{HASH}"))
    assert probe(request)["in_generation"] is False
    monkeypatch.setattr(sys, "base_prefix", str(gen))
    monkeypatch.setattr(sys, "prefix", str(gen))
    assert probe(request)["in_generation"] is False  # not a venv at all


def test_long_lines_undecodable_bytes_and_colons_in_values(tmp_path: Path) -> None:
    path = tmp_path / "METADATA"
    path.write_bytes(
        b"Description: " + b"d" * 10_000 + b"\nName: caf\xe9\n"
        b"Requires-Dist: pkg ; extra == 'a:b'\nVersion: 1.0\n"
    )
    assert metadata_headers(path) == {
        "name": ["caf\ufffd"],
        "requires-dist": ["pkg ; extra == 'a:b'"],
        "version": ["1.0"],
    }


def test_the_header_limits_per_file_and_per_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "METADATA"
    path.write_bytes(b"Name: abc\n" * 5)  # 50 bytes, no blank line
    monkeypatch.setattr(agent_probe, "MAX_ENV_HEADER", 50)
    monkeypatch.setattr(agent_probe, "HEADER_BYTES", [0])
    assert metadata_headers(path)["name"] == ["abc"] * 5
    monkeypatch.setattr(agent_probe, "MAX_ENV_HEADER", 49)
    with pytest.raises(AgentError, match="headers read exceed 49 bytes") as info:
        metadata_headers(path)
    assert info.value.kind == "unsafe"
    monkeypatch.setattr(agent_probe, "MAX_ENV_HEADER", 1000)
    monkeypatch.setattr(agent_probe, "MAX_ENV_HEADERS", 100)
    monkeypatch.setattr(agent_probe, "HEADER_BYTES", [0])
    metadata_headers(path)
    metadata_headers(path)  # 100 bytes in all: the probe's budget, not past it
    with pytest.raises(AgentError, match="headers read exceed 100 bytes"):
        metadata_headers(path)


def test_under_dash_s_the_environment_is_found_from_the_interpreter_s_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = tmp_path / "gen"
    (gen / "bin").mkdir(parents=True)
    monkeypatch.setattr(sys, "flags", SimpleNamespace(no_site=1))
    monkeypatch.setattr(sys, "executable", str(gen / "bin" / "python"))
    assert interpreter_facts(str(tmp_path))["prefix"] == sys.prefix  # no pyvenv.cfg
    (gen / "pyvenv.cfg").write_text("home = /usr/bin\n")
    facts = interpreter_facts(str(tmp_path))
    assert facts["prefix"] == str(gen) and facts["in_venv"] is True
    assert facts["executable"] == str(gen / "bin" / "python")
    (gen / "pyvenv.cfg").unlink()
    (gen / "bin" / "pyvenv.cfg").write_text("home = /usr/bin\n")  # beside the executable
    assert interpreter_facts(str(tmp_path))["prefix"] == str(gen)


def test_what_the_probe_is_asked_changes_what_it_reports(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "history.jsonl").write_text(
        "".join(json.dumps({"to": f"{n}-{HASH}"}) + "\n" for n in range(25))
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    os.chmod(cache, 0o777)  # another user may write it: said, as the root's trust is
    startup = tmp_path / "startup"
    startup.mkdir()
    device = tmp_path / "dev-accel0"
    device.write_text("")
    uv = {"path": str(tmp_path / "uv"), "version": "0.0.1"}
    request = {
        "root": str(root),
        "cache_dir": str(cache),
        "startup": str(startup),
        "devices": [str(device)],
        "uv": uv,
    }
    state = probe(request)
    assert state["machine"] == os.uname().machine
    assert state["libc"] == os.confstr("CS_GNU_LIBC_VERSION") and state["libc"]
    assert state["container"] == agent_probe.container_kind()
    assert [h["to"] for h in state["history"]] == [f"{n}-{HASH}" for n in range(5, 25)]
    assert state["trust"]["cache_dir"] and "writable" in state["trust"]["cache_dir"]
    assert str(device) in json.dumps(state["hardware"])
    assert state["uv"] == uv_state(uv)
    assert state["startup_ready"] is False
    (startup / ".complete").write_text("")
    assert probe(request)["startup_ready"] is True
    assert "startup_ready" not in probe({"root": str(root)})
