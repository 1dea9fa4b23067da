"""Real remote-target infrastructure for tests: an sshd "Proxmox node" and LXC containers.

Registered by tests/conftest.py (``pytest_plugins = ["tests.remote.fixtures"]``). Nothing here
is a mock: ``node_sshd`` is a real OpenSSH server on 127.0.0.1 whose PATH puts the test-only
``pct`` (tests/remote/pct) first, and ``lxc_container`` makes real LXC containers named by
VMID from a cached Debian bookworm rootfs (tests/remote/rootfs.sh). So the path
ssh -> pct exec VMID -- argv -> lxc-attach -> the container is the one a Proxmox node has.

Fixtures:
  system_ready     (session) None; installs lxc/debootstrap/openssh-server when missing.
  rootfs_tarball   (session) Path of the cached rootfs tarball.
  rootfs_tree      (session) Path of that tarball unpacked once: the containers' lower layer.
  node_sshd        (session) Node: host, port, user, identity_file, known_hosts_file, ...
                   Its sshd accepts ENVLOCK_TEST_PVE_VERSION (ssh -o SetEnv=...), which
                   makes the test pct that of an older Proxmox VE.
  bare_node_sshd   (session) Node: the same kind of sshd, without pct on its PATH.
  lxc_container    (function) make(vmid=None, mounts=()) -> int VMID of a running container.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PCT = HERE / "pct"
ROOTFS_SH = HERE / "rootfs.sh"
SYSTEM_DEPS = REPO / "tests" / "setup" / "system-deps.sh"

SSHD = "/usr/sbin/sshd"
LXC_PATH = Path("/var/lib/lxc")
# VMIDs the suite may use; each is guarded by a flock while a session holds it.
VMID_RANGE = range(9100, 9200)
VMID_LOCK_DIR = Path("/run/lock/envlock-tests")
NODE_PATH_TAIL = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), NODE_PATH_TAIL])
# Paths inside a test container (rootfs.sh's Debian, entered as root by pct exec), not on
# this machine: root's home there, a venv a user made by hand in it, and envlock's root.
CONTAINER_HOME = "/root"
CONTAINER_VENV = f"{CONTAINER_HOME}/venv"
CONTAINER_ROOT = "/opt/envroot"

# tool -> Debian package that provides it
_TOOLS = {
    "lxc-create": "lxc",
    "lxc-start": "lxc",
    "lxc-attach": "lxc",
    "lxc-info": "lxc",
    "lxc-stop": "lxc",
    "debootstrap": "debootstrap",
    SSHD: "openssh-server",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "flock": "util-linux",
}


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=_SEARCH_PATH)


def _missing_tools() -> dict[str, str]:
    return {tool: pkg for tool, pkg in _TOOLS.items() if _which(tool) is None}


def _run(argv: Sequence[str | os.PathLike[str]], **kw) -> subprocess.CompletedProcess[str]:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 120)
    return subprocess.run([os.fspath(a) for a in argv], check=False, **kw)


# --------------------------------------------------------------------------- system_ready


@pytest.fixture(scope="session")
def system_ready() -> None:
    """LXC, debootstrap and OpenSSH are installed (installs them when missing), we are root."""
    if os.geteuid() != 0:
        pytest.fail("remote tests need root (LXC containers, debootstrap, sshd as root)")
    missing = _missing_tools()
    if missing:
        pkgs = sorted(set(missing.values()) | {"lxc", "debootstrap", "openssh-server"})
        proc = _run(["bash", SYSTEM_DEPS, *pkgs], timeout=900)
        missing = _missing_tools()
        if missing:
            pytest.fail(
                f"missing {', '.join(sorted(missing))} (Debian packages: "
                f"{', '.join(sorted(set(missing.values())))}); "
                f"`bash {SYSTEM_DEPS.relative_to(REPO)} {' '.join(pkgs)}` exited "
                f"{proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )


# --------------------------------------------------------------------------- rootfs


@pytest.fixture(scope="session")
def rootfs_tarball(system_ready: None) -> Path:
    """The cached Debian bookworm minbase+python3+python3-venv rootfs tarball (built once)."""
    return build_rootfs()


@pytest.fixture(scope="session")
def rootfs_tree(rootfs_tarball: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The rootfs tarball unpacked once per session: the read-only lower layer of every test
    container's rootfs (an overlay whose upper layer is the container's own)."""
    tree = tmp_path_factory.mktemp("lxc-rootfs") / "tree"
    tree.mkdir()
    untar = _run(
        ["tar", "--numeric-owner", "--xattrs", "--acls", "-C", tree, "-xf", rootfs_tarball],
        timeout=300,
    )
    if untar.returncode != 0:
        pytest.fail(f"unpacking {rootfs_tarball} into {tree} failed: {untar.stderr}")
    try:
        yield tree
    finally:
        _run(["rm", "-rf", "--one-file-system", tree], timeout=300)


def build_rootfs() -> Path:
    """rootfs.sh's tarball (built once, cached): LXC's containers and the Docker image."""
    try:
        proc = _run(["bash", ROOTFS_SH], timeout=1800)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{ROOTFS_SH.relative_to(REPO)} took more than 30 minutes")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not Path(lines[-1]).is_file():
        pytest.fail(
            f"building the test rootfs failed ({ROOTFS_SH.relative_to(REPO)} exited "
            f"{proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return Path(lines[-1])


# --------------------------------------------------------------------------- node_sshd


@dataclass(frozen=True)
class Node:
    """A real sshd on loopback standing in for a Proxmox node (``pct`` on its PATH)."""

    host: str
    port: int
    user: str
    identity_file: Path
    known_hosts_file: Path
    #: an ssh_config(5) file with ``Host node`` set up for this server (``ssh -F FILE node``)
    ssh_config_file: Path
    #: directory holding the test ``pct`` (first on the PATH of ssh sessions)
    pct_dir: Path
    sshd_log: Path = field(repr=False)

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}"

    def ssh_options(self) -> list[str]:
        """ssh options (no destination) that reach this node non-interactively."""
        return [
            "-F",
            "/dev/null",
            "-p",
            str(self.port),
            "-i",
            str(self.identity_file),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts_file}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
        ]

    def ssh_argv(self, *remote_argv: str | os.PathLike[str]) -> list[str]:
        """``ssh ... root@127.0.0.1 <shlex.join(remote_argv)>``: quoted once, for the node's shell.

        Without ``remote_argv`` ssh would open a login shell: pass a command.
        """
        argv = ["ssh", *self.ssh_options(), self.destination]
        if remote_argv:
            argv.append(shlex.join(os.fspath(a) for a in remote_argv))
        return argv

    def run(
        self,
        *remote_argv: str | os.PathLike[str],
        input: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``remote_argv`` on the node over ssh; stdin is ``input`` (or empty)."""
        return subprocess.run(
            self.ssh_argv(*remote_argv),
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _banner(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            return s.recv(64).startswith(b"SSH-")
    except OSError:
        return False


def _keygen(path: Path, comment: str) -> str:
    proc = _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path])
    if proc.returncode != 0:
        pytest.fail(f"ssh-keygen failed: {proc.stderr}")
    return path.with_suffix(".pub").read_text().strip()


def node_uv_cache() -> str:
    cache = os.environ.get("UV_CACHE_DIR")
    return f" UV_CACHE_DIR={cache}" if cache else ""


def _sshd_config(d: Path, port: int, env: str = "") -> str:
    return "\n".join(
        [
            f"Port {port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {d / 'ssh_host_ed25519_key'}",
            f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitUserEnvironment no",
            "PrintMotd no",
            "PrintLastLog no",
            "UseDNS no",
            "MaxStartups 64:30:128",
            "MaxSessions 64",
            # The node's uv uses the test session's cache, never root's own (hermetic runs).
            f"SetEnv PATH={d / 'bin'}:{NODE_PATH_TAIL}{node_uv_cache()}{env}",
            # A client may ask for the pct of an older PVE (tests/remote/pct reads it).
            "AcceptEnv ENVLOCK_TEST_PVE_VERSION",
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            "",
        ]
    )


@pytest.fixture(scope="session")
def node_sshd(system_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A real sshd on 127.0.0.1:<free port> as root, with the test ``pct`` first on PATH."""
    with _serve_node(tmp_path_factory.mktemp("node_sshd"), with_pct=True) as node:
        yield node


@pytest.fixture(scope="session")
def bare_node_sshd(system_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A real sshd like ``node_sshd`` whose PATH has no ``pct``: a host that is no PVE node."""
    with _serve_node(tmp_path_factory.mktemp("bare_node_sshd"), with_pct=False) as node:
        yield node


@contextlib.contextmanager
def _serve_node(d: Path, *, with_pct: bool, env: dict[str, str] | None = None) -> Iterator[Node]:
    """An sshd on loopback as root; `env`: more variables every session there has."""
    (d / "bin").mkdir()
    if with_pct:
        (d / "bin" / "pct").symlink_to(PCT)
    host_pub = _keygen(d / "ssh_host_ed25519_key", "envlock-test-node")
    client_pub = _keygen(d / "id_ed25519", "envlock-test-client")
    (d / "authorized_keys").write_text(client_pub + "\n")
    (d / "authorized_keys").chmod(0o600)
    log = d / "sshd.log"
    # sshd's privilege separation directory (systemd's ssh.service makes it on a normal boot)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    proc: subprocess.Popen[bytes] | None = None
    port = 0
    for _attempt in range(5):
        port = _free_port()
        config = d / "sshd_config"
        extra = "".join(f" {k}={v}" for k, v in (env or {}).items())
        config.write_text(_sshd_config(d, port, extra))
        check = _run([SSHD, "-t", "-f", config])
        if check.returncode != 0:
            pytest.fail(f"sshd rejects the test config {config}:\n{check.stderr}")
        proc = subprocess.Popen(
            [SSHD, "-D", "-f", str(config), "-E", str(log)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None and not _banner(port):
            time.sleep(0.02)
        if proc.poll() is None and _banner(port):
            break
        _stop(proc)
        proc = None  # port taken between _free_port() and bind: try another
    if proc is None:
        pytest.fail(f"sshd did not start on 127.0.0.1:\n{_tail(log)}")

    known_hosts = d / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_pub}\n")
    ssh_config = d / "ssh_config"
    ssh_config.write_text(
        "Host node\n"
        "  HostName 127.0.0.1\n"
        f"  Port {port}\n"
        "  User root\n"
        f"  IdentityFile {d / 'id_ed25519'}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known_hosts}\n"
        "  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
        "  LogLevel ERROR\n"
    )
    node = Node(
        host="127.0.0.1",
        port=port,
        user="root",
        identity_file=d / "id_ed25519",
        known_hosts_file=known_hosts,
        ssh_config_file=ssh_config,
        pct_dir=d / "bin",
        sshd_log=log,
    )
    try:
        probe = node.run("true", timeout=30)
        if probe.returncode != 0:
            pytest.fail(
                f"ssh to the test sshd failed (exit {probe.returncode}): {probe.stderr}\n"
                f"sshd log:\n{_tail(log)}"
            )
        yield node
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()  # sshd -D: SIGTERM ends the listener; sessions end with their clients
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return f"({path} unreadable)"


# --------------------------------------------------------------------------- lxc_container


def _fstab_escape(path: str) -> str:
    """Escape a path for an fstab-format field (lxc.mount.entry)."""
    out = []
    for ch in path:
        if ch in " \t\n\\":
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return "".join(out)


def _lxc_state(name: str) -> str:
    return _run(["lxc-info", "-n", name, "-s", "-H"], timeout=30).stdout.strip()


def _destroy(name: str) -> list[str]:
    """Stop (hard) and remove container ``name``; returns a list of problems (empty: fine).

    A stopped dir-backed container without snapshots is its directory: unmounting its rootfs
    (an overlay, see ``lxc_container``) and removing the directory is what ``lxc-destroy``
    does, without its file-by-file walk (seconds per container on a busy machine)."""
    problems: list[str] = []
    ctdir = LXC_PATH / name
    if not ctdir.exists():
        return problems
    if _lxc_state(name) not in ("STOPPED", ""):
        stop = _run(["lxc-stop", "-n", name, "-k"], timeout=60)
        if stop.returncode != 0 and _lxc_state(name) not in ("STOPPED", ""):
            problems.append(f"lxc-stop -k {name}: {stop.stderr.strip()}")
            return problems  # never delete the rootfs of a running container
    rootfs = ctdir / "rootfs"
    if os.path.ismount(rootfs):
        umount = _run(["umount", rootfs], timeout=60)
        if umount.returncode != 0:
            problems.append(f"umount {rootfs}: {umount.stderr.strip()}")
            return problems
    rm = _run(["rm", "-rf", "--one-file-system", ctdir], timeout=120)
    if rm.returncode != 0 or ctdir.exists():
        problems.append(f"cannot remove {ctdir}: {rm.stderr.strip()}".strip())
    return problems


def _lock_vmid(vmid: int, wait: float) -> int | None:
    """An fd holding an exclusive flock for ``vmid``, or None if another process holds it.

    Other pytest sessions on this machine use the same locks, so two sessions never share a
    container; a container whose lock nobody holds is a leftover and may be removed.
    """
    VMID_LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(VMID_LOCK_DIR / f"{vmid}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.2)


MakeContainer = Callable[..., int]


@pytest.fixture
def lxc_container(rootfs_tree: Path) -> Iterator[MakeContainer]:
    """Factory: ``make(vmid=None, mounts=()) -> vmid`` of a running LXC container.

    The container is named ``str(vmid)`` under /var/lib/lxc/<vmid>/, its rootfs there too
    (a dir-backed container): an overlay mounted at /var/lib/lxc/<vmid>/rootfs (what the
    host and the container see alike) whose lower layer is the session's unpacked rootfs
    (``rootfs_tree``, never written) and whose upper layer is the container's own, so a
    container starts with the tarball's files without unpacking 130 MB each time, with
    ``lxc.net.0.type = empty``, ``lxc.apparmor.profile = unconfined``,
    ``lxc.init.cmd = /usr/bin/sleep infinity``, ``lxc.pty.max = 1024``, hostname
    ``CT<vmid>`` and one read-write bind mount per ``(host_dir, container_path)``.
    ``vmid=None`` picks a free VMID in 9100-9199. Every container made is stopped and
    removed at teardown, even on failure.
    """
    stack = contextlib.ExitStack()
    made: list[str] = []

    def make(vmid: int | None = None, mounts: Sequence[tuple[str | os.PathLike[str], str]] = ()):
        if vmid is None:
            for candidate in VMID_RANGE:
                if str(candidate) in made:
                    continue
                fd = _lock_vmid(candidate, wait=0)
                if fd is not None:
                    vmid = candidate
                    break
            else:
                pytest.fail(f"no free test VMID in {VMID_RANGE.start}-{VMID_RANGE.stop - 1}")
        else:
            if not 100 <= vmid <= 999_999_999:
                raise ValueError(f"{vmid} is not a valid Proxmox VMID (100-999999999)")
            if str(vmid) in made:
                raise ValueError(f"container {vmid} was already made in this test")
            fd = _lock_vmid(vmid, wait=600)
            if fd is None:
                pytest.fail(f"VMID {vmid} stayed in use by another test session for 10 min")
        stack.callback(os.close, fd)  # releases the lock, after the container is removed
        name = str(vmid)
        ctdir = LXC_PATH / name
        problems = _destroy(name)  # a leftover of a killed run (we hold its lock)
        if problems:
            pytest.fail(f"cannot clean up leftover container {name}: {'; '.join(problems)}")
        made.append(name)

        entries = []
        for host_dir, ct_path in mounts:
            host = Path(host_dir)
            if not host.exists():
                raise FileNotFoundError(f"bind mount source {host} does not exist")
            if not str(ct_path).startswith("/"):
                raise ValueError(f"container path {ct_path!r} must be absolute")
            kind = "file" if host.is_file() else "dir"
            entries.append(
                f"lxc.mount.entry = {_fstab_escape(str(host.resolve()))} "
                f"{_fstab_escape(str(ct_path).lstrip('/'))} none bind,create={kind},rw 0 0"
            )
        rootfs = ctdir / "rootfs"
        for sub in ("rootfs", "upper", "work"):
            (ctdir / sub).mkdir(parents=True)
        layers = f"lowerdir={rootfs_tree},upperdir={ctdir / 'upper'},workdir={ctdir / 'work'}"
        mounted = _run(["mount", "-t", "overlay", "overlay", "-o", layers, rootfs], timeout=60)
        if mounted.returncode != 0:
            pytest.fail(f"mounting the overlay rootfs of container {name} failed: {mounted.stderr}")
        (ctdir / "config").write_text(
            "\n".join(
                [
                    "# envlock test container (tests/remote/fixtures.py)",
                    f"lxc.uts.name = CT{vmid}",
                    f"lxc.rootfs.path = dir:{rootfs}",
                    "lxc.net.0.type = empty",
                    "lxc.apparmor.profile = unconfined",
                    "lxc.init.cmd = /usr/bin/sleep infinity",
                    # As PVE's containers (its common.conf): terminals for what runs inside.
                    "lxc.pty.max = 1024",
                    *entries,
                    "",
                ]
            )
        )
        log = ctdir / "lxc-start.log"
        start = _run(["lxc-start", "-n", name, "-l", "WARN", "-o", log], timeout=60)
        if start.returncode != 0:
            pytest.fail(f"lxc-start -n {name} failed: {start.stderr}\n{_tail(log)}")
        deadline = time.monotonic() + 30
        while True:
            attach = _run(["lxc-attach", "-n", name, "--clear-env", "--", "true"], timeout=30)
            if attach.returncode == 0:
                return vmid
            if time.monotonic() > deadline:
                pytest.fail(
                    f"container {name} started but `lxc-attach -n {name} -- true` fails: "
                    f"{attach.stderr}\n{_tail(log)}"
                )
            time.sleep(0.05)

    with stack:
        try:
            yield make
        finally:
            problems = [p for name in reversed(made) for p in _destroy(name)]
            if problems:
                pytest.fail(f"tearing down test containers: {'; '.join(problems)}")
