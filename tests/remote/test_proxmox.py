"""The Proxmox API layer against fakepve's HTTPS server, verified with its CA.

Pure tests first (profile -> PVE config, differences), then login, the container lifecycle,
snapshots, and each fault: HTTP 500 on create, a failing create task, a task that outlives
the timeout, a 403 for device passthrough with an API token. Every error must name what
failed, leave nothing half-claimed, and never show the secret; a re-run once the fault is
gone must complete.
"""

from __future__ import annotations

import dataclasses
import socket
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from envlock.errors import EnvlockError, OperationError, UsageError
from envlock.proxmox.api import ProxmoxSession, connect, parse_api_url
from envlock.proxmox.config import (
    ConfigDifference,
    config_differences,
    config_update,
    desired_config,
    root_only_keys,
)
from envlock.proxmox.containers import ensure_container
from envlock.proxmox.guest import container_status
from envlock.proxmox.provision import LxcProvisioner, snapshot_name
from envlock.proxmox.settings import Container, LxcSettings, Mount
from envlock.proxmox.snapshots import SNAPSHOT_NAME, list_snapshots, rollback, snapshot
from envlock.proxmox.tasks import TaskFailed, TaskResult, TaskTimeout
from envlock.targets.ssh import SshSettings

PASSWORD = "pw-7Hq2xK-never-printed"
TOKEN_SECRET = "tok-5b1e9c2a-never-printed"
SECRET_ENV = "ENVLOCK_TEST_PVE_PASSWORD"
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
VMID = 200

pytestmark = pytest.mark.fakepve(password=PASSWORD)

CONTAINER = Container(
    ostemplate=TEMPLATE,
    rootfs="local-lvm:8",
    cores=4,
    memory=2048,
    swap=0,
    hostname="trainer",
    unprivileged=False,
    features=("nesting=1", "keyctl=1"),
    net=("name=eth0,bridge=vmbr0,ip=dhcp",),
    devices=("/dev/nvidia0", "/dev/nvidiactl"),
    mounts=(Mount("/tank/workspace", "/workspace"), Mount("/data", "/data", ro=True)),
)


# -- pure: profile -> config, differences ------------------------------------------------


def test_desired_config_maps_the_profile_to_lxc_parameters() -> None:
    assert desired_config(CONTAINER) == {
        "ostemplate": TEMPLATE,
        "rootfs": "local-lvm:8",
        "cores": 4,
        "memory": 2048,
        "swap": 0,
        "hostname": "trainer",
        "unprivileged": 0,
        "features": "nesting=1,keyctl=1",
        "net0": "name=eth0,bridge=vmbr0,ip=dhcp",
        "dev0": "/dev/nvidia0",
        "dev1": "/dev/nvidiactl",
        "mp0": "/tank/workspace,mp=/workspace",
        "mp1": "/data,mp=/data,ro=1",
    }


def test_desired_config_leaves_out_what_the_profile_does_not_say() -> None:
    plain = Container(ostemplate=TEMPLATE, rootfs="local-lvm:8", unprivileged=True)
    config = desired_config(plain)
    assert config["unprivileged"] == 1
    assert not {"hostname", "features"} & set(config)
    assert not [k for k in config if k[:3] in ("net", "dev") or k.startswith("mp")]


# What PVE reads back after creating CONTAINER: normalised, with hwaddr, type and volume.
AS_CREATED: dict[str, Any] = {
    "cores": 4,
    "memory": "2048",
    "swap": 0,
    "hostname": "trainer",
    "features": "keyctl=1,nesting=1",
    "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:E2:06:E0,ip=dhcp,type=veth",
    "dev0": "path=/dev/nvidia0",
    "dev1": "/dev/nvidiactl",
    "rootfs": "local-lvm:vm-200-disk-0,size=8G",
    "mp0": "/tank/workspace,mp=/workspace",
    "mp1": "/data,mp=/data,ro=true",
    "ostype": "debian",
    "arch": "amd64",
    "digest": "71d4c927d4",
}


def test_a_container_as_pve_writes_it_back_has_no_differences() -> None:
    assert config_differences(desired_config(CONTAINER), AS_CREATED) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"cores": 2}, [ConfigDifference("cores", 4, 2, live=True)]),
        ({"hostname": "old"}, [ConfigDifference("hostname", "trainer", "old", live=True)]),
        (
            {"features": "nesting=1"},
            [ConfigDifference("features", "nesting=1,keyctl=1", "nesting=1", True)],
        ),
        (
            {"net0": "name=eth0,bridge=vmbr1,hwaddr=BC:24:11:E2:06:E0,ip=dhcp,type=veth"},
            [
                ConfigDifference(
                    "net0",
                    "name=eth0,bridge=vmbr0,ip=dhcp",
                    "name=eth0,bridge=vmbr1,hwaddr=BC:24:11:E2:06:E0,ip=dhcp,type=veth",
                    live=True,
                )
            ],
        ),
        (
            {"dev1": None, "dev7": "/dev/sda"},
            [
                ConfigDifference("dev1", "/dev/nvidiactl", None, True),
                ConfigDifference("dev7", None, "/dev/sda", True),
            ],
        ),
        (
            {"mp1": "/data,mp=/data"},
            [ConfigDifference("mp1", "/data,mp=/data,ro=1", "/data,mp=/data", True)],
        ),
    ],
    ids=["cores", "hostname", "features", "net-bridge", "devices", "mount-ro"],
)
def test_live_differences(changes: dict[str, Any], expected: list[ConfigDifference]) -> None:
    actual = {k: v for k, v in {**AS_CREATED, **changes}.items() if v is not None}
    assert config_differences(desired_config(CONTAINER), actual) == expected


@pytest.mark.parametrize(
    ("key", "value", "note"),
    [
        ("rootfs", "local-lvm:vm-200-disk-0,size=4G", "pct resize"),
        ("rootfs", "other:vm-200-disk-0,size=8G", "pct resize"),
        ("unprivileged", 1, "recreate"),
        ("mp0", "local-lvm:vm-200-disk-1,mp=/workspace,size=8G", "storage volume"),
    ],
)
def test_differences_the_config_api_cannot_fix(key: str, value: object, note: str) -> None:
    (diff,) = config_differences(desired_config(CONTAINER), {**AS_CREATED, key: value})
    assert (diff.key, diff.live) == (key, False)
    assert note in diff.note


def test_volume_mounts_the_profile_does_not_list_are_left_alone() -> None:
    actual = {**AS_CREATED, "mp5": "local-lvm:vm-200-disk-2,mp=/scratch,size=100G"}
    assert config_differences(desired_config(CONTAINER), actual) == []
    actual["mp6"] = "/srv,mp=/srv"  # a bind mount is declared in full by the profile
    assert [d.key for d in config_differences(desired_config(CONTAINER), actual)] == ["mp6"]


def test_config_update_keeps_the_mac_address_and_deletes_extras() -> None:
    actual = {**AS_CREATED, "net0": "name=eth0,bridge=vmbr1,hwaddr=BC:24:11:00:00:01"}
    actual["dev9"] = "/dev/sdb"
    diffs = config_differences(desired_config(CONTAINER), actual)
    assert config_update(diffs, actual) == {
        "net0": "name=eth0,bridge=vmbr0,ip=dhcp,hwaddr=BC:24:11:00:00:01",
        "delete": "dev9",
    }


def test_root_only_keys_are_devices_bind_mounts_and_features() -> None:
    params = {**desired_config(CONTAINER), "mp2": "local-lvm:8,mp=/scratch"}
    assert root_only_keys(params) == ["dev0", "dev1", "features", "mp0", "mp1"]
    assert root_only_keys({"cores": 2, "delete": "dev3,mp4,swap"}) == ["dev3"]


@pytest.mark.parametrize(
    ("exitstatus", "ok"),
    [("OK", True), ("WARNINGS: 2", True), ("unable to create CT 200 - boom", False)],
)
def test_a_task_ended_ok_only_with_ok_or_warnings(exitstatus: str, ok: bool) -> None:
    assert TaskResult("UPID:pve1:1:2:3:vzcreate:200:root@pam:", exitstatus).ok is ok


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://pve1.example:8006", ("pve1.example", 8006, None)),
        ("https://pve1.example", ("pve1.example", 8006, None)),
        ("https://10.0.0.5:443/api2/json/", ("10.0.0.5", 443, None)),
        ("https://proxy.example/pve/api2/json", ("proxy.example", 8006, "pve")),
        ("https://[fd00::5]:8006", ("fd00::5", 8006, None)),
    ],
)
def test_parse_api_url(url: str, expected: tuple[str, int, str | None]) -> None:
    assert parse_api_url(url) == expected


def test_an_api_url_that_is_not_https_is_a_usage_error() -> None:
    fails(UsageError, lambda: parse_api_url("http://pve1:8006"), "https://")


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture
def target(fakepve_url: str, fakepve_cafile: str, monkeypatch: pytest.MonkeyPatch) -> LxcSettings:
    """root@pam with its password from the environment, TLS verified with fakepve's CA."""
    monkeypatch.setenv(SECRET_ENV, PASSWORD)
    return LxcSettings(
        ssh=SshSettings(host="127.0.0.1"),
        api_url=fakepve_url,
        node="pve1",
        vmid=VMID,
        api_user="root@pam",
        secret_env=SECRET_ENV,
        ca_file=fakepve_cafile,
    )


@pytest.fixture
def token_target(target: LxcSettings, fakepve: Any, tmp_path: Path) -> LxcSettings:
    """root@pam's API token `envlock`, its secret in a file."""
    fakepve.apitokens["root@pam!envlock"] = TOKEN_SECRET
    secret = tmp_path / "token"
    secret.write_text(TOKEN_SECRET + "\n")
    secret.chmod(0o600)  # a secret file others can read is refused
    return dataclasses.replace(target, token_id="envlock", secret_env=None, secret_file=str(secret))


@pytest.fixture
def session(target: LxcSettings) -> ProxmoxSession:
    return connect(target)


def no_secret(exc: BaseException) -> None:
    """The secrets appear nowhere in the error, its hint, repr or chained causes."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    text += repr(exc) + str(getattr(exc, "hint", ""))
    for secret in (PASSWORD, TOKEN_SECRET):
        assert secret not in text


def fails(error: type[EnvlockError], call: Callable[[], object], *fragments: str) -> EnvlockError:
    """Run call, expect `error` whose text holds every fragment and no secret."""
    with pytest.raises(error) as info:
        call()
    text = str(info.value)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    no_secret(info.value)
    return info.value


# -- connect ----------------------------------------------------------------------------


def test_password_login_verifies_tls_with_the_ca(target: LxcSettings) -> None:
    session = connect(target)
    assert session.version.startswith("9.")
    assert (session.user, session.token_id) == ("root@pam", None)
    assert PASSWORD not in repr(session) and PASSWORD not in repr(session.api)


def test_token_login_verifies_tls_with_the_ca(token_target: LxcSettings) -> None:
    session = connect(token_target)
    assert session.login == "API token root@pam!envlock"
    assert container_status(session, token_target).status == "absent"
    assert TOKEN_SECRET not in repr(session) and TOKEN_SECRET not in repr(session.api)


def test_token_id_may_name_its_user(token_target: LxcSettings) -> None:
    session = connect(dataclasses.replace(token_target, token_id="root@pam!envlock"))
    assert session.token_id == "envlock"
    wrong = dataclasses.replace(token_target, token_id="ops@pve!envlock")
    fails(UsageError, lambda: connect(wrong), "belongs to ops@pve", "api-user is root@pam")


def test_tls_verification_fails_without_the_ca(target: LxcSettings, fakepve_url: str) -> None:
    error = fails(
        OperationError,
        lambda: connect(dataclasses.replace(target, ca_file=None)),
        fakepve_url,
        "TLS verification",
        "certificate verify failed",
    )
    assert error.hint and "ca-file" in error.hint


@pytest.mark.filterwarnings("ignore:Unverified HTTPS request")
def test_verify_tls_false_skips_verification(target: LxcSettings) -> None:
    assert connect(dataclasses.replace(target, ca_file=None, verify_tls=False)).version


def test_a_missing_ca_file_is_a_usage_error(target: LxcSettings, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    fails(UsageError, lambda: connect(dataclasses.replace(target, ca_file=missing)), missing)


def test_connection_refused_names_the_url(target: LxcSettings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"https://127.0.0.1:{port}"
    error = fails(
        OperationError,
        lambda: connect(dataclasses.replace(target, api_url=url)),
        url,
        "Connection refused",
    )
    assert error.hint and "pveproxy" in error.hint


def test_a_wrong_password_is_refused_without_showing_it(
    target: LxcSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, TOKEN_SECRET)  # the wrong secret: must not show either
    error = fails(OperationError, lambda: connect(target), "refused the login", "HTTP 401")
    assert error.hint and SECRET_ENV in error.hint


def test_a_wrong_token_secret_is_refused_without_showing_it(
    token_target: LxcSettings, fakepve: Any
) -> None:
    fakepve.apitokens["root@pam!envlock"] = "a-different-secret"
    fails(
        OperationError,
        lambda: connect(token_target),
        "refused the login of API token root@pam!envlock",
        "HTTP 401",
    )


def test_a_server_that_is_not_pve_is_named(target: LxcSettings, fakepve: Any) -> None:
    fakepve.fail("POST", "/access/ticket", 200, "<html>a captive portal</html>", html=True)
    fails(OperationError, lambda: connect(target), "did not answer the login like the Proxmox")


def test_a_missing_secret_says_where_it_should_be(
    target: LxcSettings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(SECRET_ENV)
    fails(UsageError, lambda: connect(target), f"environment variable {SECRET_ENV} is not set")
    missing = dataclasses.replace(target, secret_env=None, secret_file=str(tmp_path / "none"))
    fails(UsageError, lambda: connect(missing), "cannot read the Proxmox secret", "none")


# -- lifecycle --------------------------------------------------------------------------


def test_ensure_creates_starts_and_then_has_nothing_to_do(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    messages: list[str] = []
    report = ensure_container(session, target, CONTAINER, on_progress=messages.append)
    assert (report.created, report.started, report.status) == (True, True, "running")
    assert report.applied == report.not_fixed == report.pending_restart == ()
    ct = fakepve.ct(VMID)
    assert ct.status == "running"
    assert ct.config["dev0"] == "/dev/nvidia0" and ct.config["mp1"] == "/data,mp=/data,ro=1"
    assert ct.config["rootfs"].startswith("local-lvm:vm-200-disk-0,size=8G")
    assert any("creating container 200" in m for m in messages)

    seen = len(fakepve.requests)
    again = ensure_container(session, target, CONTAINER)
    assert not (again.created or again.started or again.applied)
    assert not again.not_fixed and not again.pending_restart
    assert again.describe() == ["container 200 on pve1 matches the profile"]
    assert {method for method, _, _ in fakepve.requests[seen:]} == {"GET"}  # nothing written


def test_a_stopped_container_is_started(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    fakepve.ct(VMID).status = "stopped"
    report = ensure_container(session, target, CONTAINER)
    assert (report.created, report.started) == (False, True)
    assert container_status(session, target).status == "running"


def test_drift_is_fixed_live_and_restart_keys_reported(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    ct = fakepve.ct(VMID)
    mac = ct.config["net0"].split("hwaddr=")[1].split(",")[0]
    ct.config.update(cores=2, memory=1024, hostname="renamed", dev5="/dev/sda")
    ct.config["net0"] = ct.config["net0"].replace("vmbr0", "vmbr9")
    ct.config["features"] = "nesting=1"
    del ct.config["dev1"]

    report = ensure_container(session, target, CONTAINER)
    assert [d.key for d in report.applied] == [
        "cores",
        "dev1",
        "features",
        "hostname",
        "memory",
        "net0",
        "dev5",
    ]
    assert (report.created, report.started, report.not_fixed) == (False, False, ())
    # A running container takes the features and the device removal at its next start.
    assert report.pending_restart == ("dev5", "features")
    assert ct.config["cores"] == 4 and ct.config["memory"] == 2048
    assert ct.config["hostname"] == "trainer" and ct.config["dev1"] == "/dev/nvidiactl"
    assert f"hwaddr={mac}" in ct.config["net0"] and "vmbr0" in ct.config["net0"]
    assert ct.pending == {"dev5": None, "features": "keyctl=1,nesting=1"}


def test_what_the_api_cannot_fix_is_reported_not_forced(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    bigger = dataclasses.replace(CONTAINER, rootfs="local-lvm:16", unprivileged=True)
    report = ensure_container(session, target, bigger)
    assert [d.key for d in report.not_fixed] == ["rootfs", "unprivileged"]
    assert not report.applied
    assert any("pct resize" in line for line in report.describe())
    assert fakepve.ct(VMID).config["rootfs"].endswith("size=8G")


def test_a_vmid_taken_by_a_vm_is_a_usage_error(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.add_vm(VMID, "db")
    fails(UsageError, lambda: container_status(session, target), "QEMU virtual machine")
    assert fakepve.ct(VMID) is None


def test_a_container_on_another_node_is_a_usage_error(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.add_ct(VMID, node="pve2")
    error = fails(UsageError, lambda: container_status(session, target), "node pve2")
    assert error.hint and 'node = "pve2"' in error.hint


# -- snapshots --------------------------------------------------------------------------


def test_snapshot_and_rollback_of_a_running_container(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    taken = snapshot(session, target, "before-apply", "envlock apply of lock abc123")
    assert (taken.name, taken.description) == ("before-apply", "envlock apply of lock abc123")
    assert [s.name for s in list_snapshots(session, target)] == ["before-apply"]

    fakepve.ct(VMID).config["cores"] = 16
    report = rollback(session, target, "before-apply")
    assert (report.was_running, report.started) == (True, True)
    assert fakepve.ct(VMID).config["cores"] == 4
    assert container_status(session, target).status == "running"


def test_rollback_of_a_stopped_container_leaves_it_stopped(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    snapshot(session, target, "clean")
    fakepve.ct(VMID).status = "stopped"
    report = rollback(session, target, "clean")
    assert (report.was_running, report.started) == (False, False)
    assert container_status(session, target).status == "stopped"


def test_snapshot_errors(session: ProxmoxSession, target: LxcSettings) -> None:
    ensure_container(session, target, CONTAINER)
    fails(UsageError, lambda: snapshot(session, target, "no spaces"), "invalid snapshot name")
    snapshot(session, target, "one")
    error = fails(TaskFailed, lambda: snapshot(session, target, "one"), "already used", "UPID:")
    assert error.hint and "another snapshot name" in error.hint
    fails(UsageError, lambda: rollback(session, target, "two"), "no snapshot 'two'")


# -- the provisioner: one session, snapshots per apply, restarts ---------------------------


def logins(fakepve: Any) -> int:
    """Password logins seen by the fake API (a token needs none)."""
    return sum(1 for m, path, _ in fakepve.requests if (m, path) == ("POST", LOGIN_PATH))


LOGIN_PATH = "/api2/json/access/ticket"


def provisioner(target: LxcSettings, **changes: Any) -> LxcProvisioner:
    return LxcProvisioner(target, dataclasses.replace(CONTAINER, **changes))


def test_one_login_per_provisioner(target: LxcSettings, fakepve: Any) -> None:
    before = logins(fakepve)
    lxc = provisioner(target, snapshot_before_apply=True)
    assert lxc.check().exists is False
    lxc.provision(restart=False, on_progress=None)
    assert lxc.snapshot(generation="none", lock="", applying="abc", on_progress=None)
    lxc.check()
    lxc.snapshots()
    assert logins(fakepve) - before == 1


def test_snapshot_names_are_unique_per_apply_and_valid() -> None:
    now = datetime(2026, 11, 2, 12, 30, 5, tzinfo=timezone.utc)
    first = snapshot_name("3-0123456789abcdef", now, set())
    assert first == "envlock-3-20261102123005"
    assert snapshot_name("3-0123456789abcdef", now, {first}) == first + "-2"
    assert snapshot_name("none", now, set()) == "envlock-none-20261102123005"
    assert snapshot_name(None, now, set()) == "envlock-unknown-20261102123005"
    # A long generation number is cut, never the timestamp; many collisions stay short.
    taken = {"envlock-123456789012-20261102123005"}
    taken |= {f"envlock-123456789012-20261102123005-{n}" for n in range(2, 12)}
    crowded = snapshot_name("12345678901234567-x", now, taken)
    assert crowded == "envlock-123456789012-20261102123005-12"
    assert len(crowded) <= 40 and SNAPSHOT_NAME.match(crowded)


def test_each_apply_snapshots_once_and_lists_its_generation_and_lock(
    target: LxcSettings, fakepve: Any
) -> None:
    lxc = provisioner(target, snapshot_before_apply=True)
    lxc.provision(restart=False, on_progress=None)
    # The same generation twice (a resync, a script deploy): two snapshots, no collision.
    names = [
        lxc.snapshot(generation="2-abc123", lock="abc123", applying="abc123", on_progress=None)
        for _ in range(2)
    ]
    assert len(set(names)) == 2 and all(n and n.startswith("envlock-2-") for n in names)
    listed = lxc.snapshots()
    assert [(s.name, s.generation, s.lock, s.ours) for s in listed] == [
        (name, "2-abc123", "abc123", True) for name in names
    ]
    assert all(s.taken for s in listed)


def test_no_snapshot_unless_the_profile_asks(target: LxcSettings, fakepve: Any) -> None:
    lxc = provisioner(target)
    lxc.provision(restart=False, on_progress=None)
    assert lxc.snapshot(generation="1-a", lock="a", applying="b", on_progress=None) is None
    assert fakepve.ct(VMID).snapshots == {}


def test_keep_snapshots_prunes_only_envlock_s_own(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    lxc = provisioner(target, snapshot_before_apply=True, keep_snapshots=2)
    lxc.provision(restart=False, on_progress=None)
    snapshot(session, target, "before-upgrade", "taken by hand")
    said: list[str] = []
    names = [
        lxc.snapshot(generation=f"{n}-abc", lock="abc", applying="abc", on_progress=said.append)
        for n in range(1, 5)
    ]
    left = [s.name for s in list_snapshots(session, target)]
    assert left == ["before-upgrade", *names[2:]]
    assert any(f"deleting LXC snapshot {names[0]}" in line for line in said)
    # rollback without a name picks the newest of envlock's own
    assert lxc.rollback(None, None) == names[-1]


def test_a_change_waiting_for_a_restart_is_drift_until_restarted(
    target: LxcSettings, fakepve: Any
) -> None:
    lxc = provisioner(target)
    lxc.provision(restart=False, on_progress=None)
    assert lxc.check().drifts == ()
    bigger = provisioner(target, features=("nesting=1",))
    report = bigger.provision(restart=False, on_progress=None)
    assert report[-1].endswith("at its next restart: `envlock apply --restart`")
    drift = bigger.check().drifts
    assert [(d.kind, d.subject) for d in drift] == [("container-restart", "features")]
    assert drift[0].detail == (
        "features keyctl=1,nesting=1 → nesting=1 takes effect after a restart: "
        "`envlock apply --restart`"
    )
    said: list[str] = []
    report = bigger.provision(restart=True, on_progress=said.append)
    assert "restarted container 200: features took effect" in report
    assert any("restarting container 200" in line for line in said)
    assert bigger.check().drifts == ()
    assert fakepve.ct(VMID).config["features"] == "nesting=1"


# -- faults -----------------------------------------------------------------------------


def test_http_500_on_create_then_a_clean_rerun(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.fail("POST", "/nodes/pve1/lxc", 500, "storage backend exploded", times=1)
    fails(
        OperationError,
        lambda: ensure_container(session, target, CONTAINER),
        "creating container 200 on node pve1 failed",
        "storage backend exploded",
        "HTTP 500",
        "nothing was created: container 200 does not exist",
    )
    assert fakepve.ct(VMID) is None
    assert ensure_container(session, target, CONTAINER).created


def test_a_failing_create_task_leaves_nothing_then_a_clean_rerun(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    # With one template on the storage, the node knows ours is missing: the task fails.
    fakepve.store_file("local", "ubuntu-24.04-standard_24.04-2_amd64.tar.zst", 1, "vztmpl")
    error = fails(
        TaskFailed,
        lambda: ensure_container(session, target, CONTAINER),
        "creating container 200 on node pve1 failed: task UPID:pve1:",
        ":vzcreate:200:",
        f"volume '{TEMPLATE}' does not exist",
        "nothing was left behind",
    )
    assert error.hint and "pveam download local debian-12-standard" in error.hint
    assert fakepve.ct(VMID) is None

    fakepve.store_file("local", TEMPLATE.split("/")[-1], 1, "vztmpl")
    report = ensure_container(session, target, CONTAINER)
    assert report.created and report.status == "running"


def leave_a_container(fakepve: Any, **options: Any) -> Callable[[str], None]:
    """A progress callback that puts a container where the failed create task was.

    PVE removes a failed create's container itself, and so does fakepve; a node whose
    cleanup was cut short leaves one behind.
    """

    def leave_one(message: str) -> None:
        if message.startswith("waiting for task") and fakepve.ct(VMID) is None:
            fakepve.add_ct(VMID, **options)

    return leave_one


def test_a_container_left_by_a_failed_create_is_removed(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.store_file("local", "other-template.tar.zst", 1, "vztmpl")
    leave_one = leave_a_container(fakepve)
    error = fails(
        TaskFailed,
        lambda: ensure_container(session, target, CONTAINER, on_progress=leave_one),
        "does not exist",
        "the container 200 it left behind was removed",
    )
    assert isinstance(error, TaskFailed)
    assert error.result.exitstatus.startswith("unable to create CT 200")
    assert fakepve.ct(VMID) is None
    assert [t["type"] for t in fakepve.tasklog] == ["vzcreate", "vzdestroy"]
    fakepve.store_file("local", TEMPLATE.split("/")[-1], 1, "vztmpl")
    assert ensure_container(session, target, CONTAINER).created


def test_a_locked_leftover_of_a_failed_create_names_the_manual_fix(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.store_file("local", "other-template.tar.zst", 1, "vztmpl")
    leave_one = leave_a_container(fakepve, lock="create")
    error = fails(
        OperationError,
        lambda: ensure_container(session, target, CONTAINER, on_progress=leave_one),
        "does not exist",
        "left container 200 locked (create)",
    )
    assert error.hint and "pct unlock 200 && pct destroy 200 --purge" in error.hint


def test_a_locked_leftover_without_a_task_names_the_manual_fix(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.add_ct(VMID, lock="create")
    error = fails(
        OperationError,
        lambda: ensure_container(session, target, CONTAINER),
        "locked (create) but no create task is running",
    )
    assert error.hint and "pct unlock 200" in error.hint
    assert fakepve.ct(VMID) is not None  # not ours to delete


def test_a_create_that_outlives_the_timeout_is_taken_over_by_the_rerun(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.time_scale = 0.01
    fakepve.ct_secs["create"] = 150  # 1.5 s of real time: far beyond the 0.1 s waited
    error = fails(
        TaskTimeout,
        lambda: ensure_container(session, target, CONTAINER, timeout=0.1),
        "creating container 200 on node pve1: task UPID:pve1:",
        "did not finish within 0.1 s",
        "still running on node pve1",
    )
    assert isinstance(error, TaskTimeout) and ":vzcreate:200:" in error.upid
    assert error.hint and "re-run waits for it" in error.hint
    assert fakepve.ct(VMID).lock == "create"  # PVE's create task holds it, not us

    messages: list[str] = []
    report = ensure_container(session, target, CONTAINER, timeout=10, on_progress=messages.append)
    assert report.created and report.status == "running"
    assert any(error.upid in m and "earlier run" in m for m in messages)
    assert [t["type"] for t in fakepve.tasklog] == ["vzcreate", "vzstart"]


def test_a_slow_start_times_out_with_its_upid(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    ct = fakepve.ct(VMID)
    ct.status, ct.start_secs = "stopped", 300
    fakepve.time_scale = 0.01
    fails(
        TaskTimeout,
        lambda: ensure_container(session, target, CONTAINER, timeout=0.1),
        "starting container 200 on node pve1: task UPID:pve1:",
        ":vzstart:200:",
    )


def test_a_failing_start_says_why(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    ct = fakepve.ct(VMID)
    ct.status, ct.start_error = "stopped", "startup for container '200' failed"
    fails(
        TaskFailed,
        lambda: ensure_container(session, target, CONTAINER),
        "starting container 200 on node pve1 failed",
        "startup for container '200' failed",
    )
    ct.start_error = None
    assert ensure_container(session, target, CONTAINER).started


def test_a_token_may_not_pass_devices_through(
    token_target: LxcSettings, target: LxcSettings, fakepve: Any
) -> None:
    fakepve.grant("auditor@pve", "/", "VM.Audit")  # any grant turns PVE's ACLs on
    token = connect(token_target)
    error = fails(
        OperationError,
        lambda: ensure_container(token, token_target, CONTAINER),
        "creating container 200 on node pve1 failed",
        "HTTP 403",
        "only root@pam, logged in with its password",
        "API token root@pam!envlock",
        "dev0, dev1, features, mp0, mp1",
    )
    assert error.hint and 'api-user = "root@pam"' in error.hint and "token-id" in error.hint
    assert fakepve.ct(VMID) is None

    # The profile's fix: root@pam with its password.
    assert ensure_container(connect(target), target, CONTAINER).created
    # Drift that adds a device, fixed by a token: the same explanation, nothing changed.
    more = dataclasses.replace(CONTAINER, devices=(*CONTAINER.devices, "/dev/nvidia-uvm"))
    fails(
        OperationError,
        lambda: ensure_container(token, token_target, more),
        "changing dev2 of container 200 failed",
        "HTTP 403",
        "only root@pam",
    )
    assert "dev2" not in fakepve.ct(VMID).config


def test_parameter_errors_carry_pve_s_per_field_messages(
    session: ProxmoxSession, target: LxcSettings
) -> None:
    bad = dataclasses.replace(CONTAINER, net=("name=eth0,bogus=1",))
    fails(
        OperationError,
        lambda: ensure_container(session, target, bad),
        "Parameter verification failed",
        "HTTP 400",
        "net0: invalid format",
    )


def test_a_locked_container_says_what_to_do(
    session: ProxmoxSession, target: LxcSettings, fakepve: Any
) -> None:
    ensure_container(session, target, CONTAINER)
    fakepve.ct(VMID).lock = "backup"
    error = fails(
        OperationError,
        lambda: ensure_container(session, target, dataclasses.replace(CONTAINER, cores=8)),
        "changing cores of container 200 failed: CT is locked (backup)",
    )
    assert error.hint and "pct unlock" in error.hint


# -- the fleet's listing: whose fault a failure is ------------------------------------
def test_a_fleet_s_listing_names_vm_audit_only_where_it_is_missing(
    token_target: LxcSettings, target: LxcSettings, fakepve: Any
) -> None:
    """PVE's /cluster/resources lists only the containers a login holds VM.Audit on (no
    403): a token without it sees an empty cluster, and that is where the privilege is
    named, with the grant that fixes it. A 500 is the API's own failure: no permissions
    hint, but where to look."""
    from envlock.proxmox.members import list_members
    from envlock.proxmox.settings import FleetSelect

    fakepve.add_ct(201, node="pve1", status="running")
    fleet = dataclasses.replace(target, vmid=None, node=None, fleet=FleetSelect(vmids=(201,)))
    assert [m.vmid for m in list_members(fleet)] == [201]

    fakepve.fail("GET", "/cluster/resources", 500, "pvestatd: cannot read rrd", times=1)
    error = fails(OperationError, lambda: list_members(fleet), "cannot read rrd", "HTTP 500")
    assert error.hint and "VM.Audit" not in error.hint and "journalctl -u pveproxy" in error.hint

    # A non-root token that holds nothing on the container: the listing leaves it out.
    fakepve.users["trainer@pve"] = PASSWORD
    fakepve.apitokens["trainer@pve!ci"] = TOKEN_SECRET
    fakepve.grant("trainer@pve!ci", "/storage/local", "Datastore.Audit")
    blind = dataclasses.replace(
        fleet, api_user="trainer@pve", token_id="ci", secret_file=token_target.secret_file,
        secret_env=None,
    )  # fmt: skip
    error = fails(OperationError, lambda: list_members(blind), "has no container 201")
    assert error.hint and "VM.Audit on /vms/201" in error.hint
    assert "pveum acl modify /vms/201 --tokens 'trainer@pve!ci' --roles PVEAuditor" in error.hint
    fakepve.grant("trainer@pve!ci", "/vms/201", "VM.Audit")
    assert [m.vmid for m in list_members(blind)] == [201]
