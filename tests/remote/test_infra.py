"""The remote test infrastructure is real: sshd on loopback, the test pct, LXC containers."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import uuid
from pathlib import Path

from tests.remote.fixtures import LXC_PATH, Node

PY_ARGV = "import json, sys; print(json.dumps(sys.argv[1:]))"


def node_name() -> str:
    return subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()


def test_ssh_runs_a_command_with_exit_code_streams_and_stdin(node_sshd: Node) -> None:
    proc = node_sshd.run(
        "sh", "-c", "echo out; echo err >&2; tr a-z A-Z; exit 7", input="hello from stdin\n"
    )
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "out\nHELLO FROM STDIN\n"
    assert proc.stderr == "err\n"
    # the plain ssh argv works too, and so does the ssh_config file
    argv = node_sshd.ssh_argv("id", "-u")
    assert argv[0] == "ssh" and argv[-1] == "id -u"
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert (out.returncode, out.stdout) == (0, "0\n"), out.stderr
    out = subprocess.run(
        ["ssh", "-F", str(node_sshd.ssh_config_file), "node", "echo", "via-config"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert (out.returncode, out.stdout) == (0, "via-config\n"), out.stderr


def test_test_pct_comes_first_on_the_node_path(node_sshd: Node) -> None:
    proc = node_sshd.run("sh", "-c", "command -v pct")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == node_sshd.pct_dir / "pct"


def test_the_node_s_uv_uses_the_session_s_cache(node_sshd: Node) -> None:
    """Remote runs are hermetic too: uv on the node writes to this test session's cache."""
    proc = node_sshd.run("sh", "-c", 'printf %s "$UV_CACHE_DIR"')
    assert proc.returncode == 0
    assert proc.stdout.strip() == os.environ["UV_CACHE_DIR"]


def test_pct_exec_reaches_a_real_debian_container(node_sshd: Node, lxc_container) -> None:
    vmid = lxc_container()
    marker = f"envlock-marker-{uuid.uuid4().hex}"
    code = (
        "import json, os, pathlib, socket, sys\n"
        f"pathlib.Path('/srv/{marker}').write_text('inside')\n"
        "print(json.dumps({'os_release': open('/etc/os-release').read(),"
        " 'hostname': socket.gethostname(), 'exe': sys.executable,"
        " 'real': os.path.realpath(sys.executable),"
        " 'version': list(sys.version_info[:2]), 'uid': os.getuid()}))"
    )
    proc = node_sshd.run("pct", "exec", str(vmid), "--", "python3", "-c", code)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert "VERSION_CODENAME=bookworm" in info["os_release"]
    assert "ID=debian" in info["os_release"]
    assert info["hostname"] == f"CT{vmid}" != socket.gethostname()
    # pct's PATH (/sbin:/bin:...) comes first with keep-env: python3 is found as /bin/python3
    assert info["exe"] == "/bin/python3"
    assert info["real"] == "/usr/bin/python3.11"
    assert info["version"] == [3, 11]
    assert info["uid"] == 0
    # the file landed in the container's rootfs, not the node's
    assert (LXC_PATH / str(vmid) / "rootfs" / "srv" / marker).read_text() == "inside"
    assert not Path("/srv", marker).exists()


def test_pct_exec_passes_exit_code_stdout_stderr_and_stdin(node_sshd: Node, lxc_container) -> None:
    vmid = str(lxc_container())
    code = (
        "import sys\n"
        "data = sys.stdin.buffer.read()\n"
        "sys.stdout.write(data.decode().upper()); sys.stderr.write('to-stderr'); sys.exit(42)"
    )
    proc = node_sshd.run("pct", "exec", vmid, "--", "python3", "-c", code, input="abc\ndef")
    assert (proc.returncode, proc.stdout, proc.stderr) == (42, "ABC\nDEF", "to-stderr")

    # a larger stdin arrives intact
    payload = os.urandom(3 << 20)
    out = subprocess.run(
        node_sshd.ssh_argv("pct", "exec", vmid, "--", "sha256sum"),
        input=payload,
        capture_output=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()

    # a command that does not exist: lxc-attach's 127; killed by a signal: 128 + n
    proc = node_sshd.run("pct", "exec", vmid, "--", "no-such-command")
    assert proc.returncode == 127
    assert 'Failed to exec "no-such-command"' in proc.stderr
    proc = node_sshd.run("pct", "exec", vmid, "--", "sh", "-c", "kill -9 $$")
    assert proc.returncode == 137


def test_pct_exec_environment_keep_and_clear(node_sshd: Node, lxc_container) -> None:
    vmid = str(lxc_container())
    cleared = node_sshd.run("pct", "exec", vmid, "--keep-env", "0", "--", "env")
    assert cleared.returncode == 0, cleared.stderr
    env = dict(line.split("=", 1) for line in cleared.stdout.splitlines())
    assert env == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "container": "lxc",
    }
    # keep-env defaults to 1: the node's ssh session leaks in, with pct's own PATH
    kept = node_sshd.run("pct", "exec", vmid, "--", "env")
    assert kept.returncode == 0, kept.stderr
    env = dict(line.split("=", 1) for line in kept.stdout.splitlines() if "=" in line)
    assert env["PATH"] == "/sbin:/bin:/usr/sbin:/usr/bin"
    assert "SSH_CONNECTION" in env
    assert "SSL_CERT_FILE" not in env
    explicit = node_sshd.run("pct", "exec", vmid, "--keep-env=1", "--", "env")
    assert "SSH_CONNECTION" in explicit.stdout


def test_pct_errors_match_proxmox(node_sshd: Node, lxc_container) -> None:
    missing = "999999990"
    proc = node_sshd.run("pct", "exec", missing, "--", "true")
    assert proc.returncode == 2
    expected = f"Configuration file 'nodes/{node_name()}/lxc/{missing}.conf' does not exist\n"
    assert proc.stderr == expected
    proc = node_sshd.run("pct", "status", missing)
    assert (proc.returncode, proc.stderr) == (2, expected)

    vmid = str(lxc_container())
    proc = node_sshd.run("pct", "exec", vmid, "--")
    assert proc.returncode == 255
    assert proc.stderr.startswith("missing command")
    assert node_sshd.run("pct", "status", vmid).stdout == "status: running\n"

    proc = node_sshd.run("pct", "stop", vmid)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert node_sshd.run("pct", "status", vmid).stdout == "status: stopped\n"
    proc = node_sshd.run("pct", "exec", vmid, "--", "true")
    assert (proc.returncode, proc.stderr) == (255, f"container '{vmid}' not running!\n")
    proc = node_sshd.run("pct", "stop", vmid)
    assert (proc.returncode, proc.stderr) == (255, f"CT {vmid} not running\n")

    proc = node_sshd.run("pct", "start", vmid)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert node_sshd.run("pct", "exec", vmid, "--", "true").returncode == 0
    proc = node_sshd.run("pct", "start", vmid)
    assert (proc.returncode, proc.stderr) == (255, f"CT {vmid} already running\n")

    proc = node_sshd.run("pct", "exec", vmid, "--keep-env", "maybe", "--", "true")
    assert proc.returncode == 255
    assert "keep-env: type check ('boolean') failed - got 'maybe'" in proc.stderr


def test_hostile_argument_arrives_literally_once_quoted_per_hop(
    node_sshd: Node, lxc_container, tmp_path: Path
) -> None:
    vmid = lxc_container()
    canary = f"/tmp/envlock-canary-{uuid.uuid4().hex}"
    hostile = [
        f'it\'s a "quoted" arg with spaces; $(touch {canary}) `touch {canary}`',
        f"; touch {canary}",
        f"&& touch {canary} | cat > {canary} \\",
        "$HOME ${PATH} * ? ~ # not a comment",
        "",
        "line one\nline two\ttab",
        "-c",
        "--",
    ]
    proc = node_sshd.run("pct", "exec", str(vmid), "--", "python3", "-c", PY_ARGV, *hostile)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == hostile
    assert not Path(canary).exists(), "the node's shell ran part of an argument"
    in_container = LXC_PATH / str(vmid) / "rootfs" / canary.lstrip("/")
    assert not in_container.exists(), "a shell in the container ran part of an argument"


def test_bind_mount_is_visible_and_writable_inside(
    node_sshd: Node, lxc_container, tmp_path: Path
) -> None:
    shared = tmp_path / "shared dir"
    shared.mkdir()
    (shared / "from-host.txt").write_text("hello container\n")
    vmid = str(lxc_container(mounts=[(shared, "/mnt/wheels")]))
    proc = node_sshd.run(
        "pct",
        "exec",
        vmid,
        "--",
        "sh",
        "-c",
        "cat /mnt/wheels/from-host.txt && echo from-container > /mnt/wheels/from-container.txt",
    )
    assert (proc.returncode, proc.stdout) == (0, "hello container\n"), proc.stderr
    assert (shared / "from-container.txt").read_text() == "from-container\n"


def test_two_containers_are_separate(lxc_container) -> None:
    a, b = lxc_container(), lxc_container()
    assert a != b
    for vmid in (a, b):
        proc = subprocess.run(
            ["lxc-attach", "-n", str(vmid), "--clear-env", "--", "hostname"],
            capture_output=True,
            text=True,
        )
        assert proc.stdout.strip() == f"CT{vmid}"
