"""One secret rule, two corpora (issue #24): what must be hidden and what must be shown.

The corpora are data: secret names with their values, secrets inside other strings (URL
credentials, DSNs, query tokens), secret command lines, and the hyperparameters a diff exists
to show (`token_budget`, `*_token_id`, `key_dim`, …). They go through base/secrets.py directly,
then through every path that records or shows a run's strings, end to end: `envlock snapshot`,
`envlock run --snapshot-into`, `envlock.snapshot()` inside a command under `envlock run` (the
stdlib-only startup API, in a real process), `diff` of snapshot files, of checkpoint
directories and of the checkpoint files in them, and `inspect`. Every path must give the same
answer: no secret value anywhere in what it writes or prints, every must-show value as it was.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import shlex
import stat
import subprocess
import sys
import threading
from collections.abc import Iterable
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from envlock.base.secrets import is_secret_name, redact_argv, redact_config, redact_env
from envlock.base.uvbin import uv_path
from envlock.errors import EXIT_USAGE, UsageError
from envlock.lock.resolve import resolver_input, uv_compile_argv
from envlock.profile.read import load_profile
from envlock.proxmox.api import read_secret
from envlock.proxmox.settings import LxcSettings
from envlock.runs.launch import remote_spec, write_private
from envlock.runs.snapshot_doc import document
from envlock.runs.snapshot_file import load_snapshot
from envlock.runs.startup_set import startup_files
from envlock.targets.ssh import SshSettings
from tests.conftest import run_envlock
from tests.index_server import write_simple_index
from tests.projects import write_seed_project
from tests.remote.fixtures import Node
from tests.wheelhouse import build_wheelhouse

# -- the corpora ---------------------------------------------------------------------------
# (name, value): a value under a name that says it is a secret. Each value is unique, so a
# leak is found by searching any output for it.
REDACT_NAMED: list[tuple[str, str]] = [
    ("api_key", "corpus-api-key-01"),
    ("apikey", "corpus-apikey-02"),
    ("key", "corpus-key-03"),
    ("hf_token", "corpus-hf-token-04"),
    ("GITHUB_PAT", "corpus-github-pat-05"),
    ("SENTRY_DSN", "corpus-sentry-dsn-06"),
    ("password", "corpus-password-07"),
    ("passphrase", "corpus-passphrase-08"),
    ("cookie", "corpus-cookie-09"),
    ("secret", "corpus-secret-10"),
    ("credentials", "corpus-credentials-11"),
    ("auth", "corpus-auth-12"),
    ("bearer", "corpus-bearer-91"),
    ("pw", "corpus-pw-92"),
    ("db_pwd", "corpus-pwd-93"),
    ("passwd", "corpus-passwd-94"),
    ("db_pw", "corpus-db-pw-95"),
    ("hfToken", "corpus-camel-token-13"),
    ("WANDB_API_KEY", "corpus-wandb-key-14"),
    ("AWS_SECRET_ACCESS_KEY", "corpus-aws-secret-15"),
    ("Authorization", "corpus-bearer-16"),
    ("access_token", "-corpus-dash-token-17"),
    ("API_KEY_VALUE", "corpus-key-value-18"),
]
# (name, value, the secret inside it): a string under an ordinary name that holds a secret.
REDACT_INSIDE: list[tuple[str, str, str]] = [
    ("resume", "https://user:corpus-url-pw-21@ckpt.example/run/step10", "corpus-url-pw-21"),
    ("HF_ENDPOINT", "https://me:corpus-endpoint-22@hf-mirror.example", "corpus-endpoint-22"),
    ("database", "postgresql://run:corpus-dsn-23@db.example:5432/runs", "corpus-dsn-23"),
    ("cache_url", "redis://:corpus-redis-24@cache.example:6379/0", "corpus-redis-24"),
    ("repo", "https://corpus-user-token-25@git.example/org/repo.git", "corpus-user-token-25"),
    ("shard", "https://data.example/s0?access_token=corpus-query-26&part=1", "corpus-query-26"),
    ("mirror", "git+https://ci:corpus-git-pw-27@git.example/x.git", "corpus-git-pw-27"),
]
# (name, value): hyperparameters and settings a diff exists to show, recorded as they are.
SHOW: list[tuple[str, Any]] = [
    ("token_budget", 1_000_000),
    ("max_tokens", 512),
    ("bos_token_id", 1),
    ("eos_token_id", 2),
    ("pad_token_id", 0),
    ("num_key_value_heads", 8),
    ("key_dim", 64),
    ("tokenizer_name", "corpus-tokenizer"),
    ("tokenizer_class", "PreTrainedTokenizerFast"),
    ("pad_token", "<pad>"),
    ("bos_token", "<s>"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("lr", 0.0003),
    ("index", "https://mirror.example/simple"),
    ("origin", "ssh://git@git.example/org/repo.git"),
    ("auth_type", "bearer"),
    ("keyboard", "us"),
    ("PWD", "/workspace/run"),
]
# Command lines: (argv, the secret in it) and argv recorded as it is.
REDACT_ARGV: list[tuple[list[str], str]] = [
    (["--key", "corpus-argv-key-31"], "corpus-argv-key-31"),
    (["--cookie", "corpus-argv-cookie-32"], "corpus-argv-cookie-32"),
    (["--hf-token", "-corpus-argv-dash-33"], "-corpus-argv-dash-33"),
    (["--api-key=corpus-argv-eq-34"], "corpus-argv-eq-34"),
    (["HF_TOKEN=corpus-argv-assign-35"], "corpus-argv-assign-35"),
    (["--resume", "https://u:corpus-argv-url-36@ckpt.example/x"], "corpus-argv-url-36"),
    (["--passphrase", "corpus-argv-pass-37"], "corpus-argv-pass-37"),
    (["--bearer", "corpus-argv-bearer-96"], "corpus-argv-bearer-96"),
    (["--pw", "corpus-argv-pw-97"], "corpus-argv-pw-97"),
    (["--pwd", "corpus-argv-pwd-98"], "corpus-argv-pwd-98"),
    (["--passwd=corpus-argv-passwd-99"], "corpus-argv-passwd-99"),
    (["BEARER=corpus-argv-bearer-100"], "corpus-argv-bearer-100"),
    (["--github-pat", "--corpus-argv-pat-38"], "--corpus-argv-pat-38"),
    (["--db=postgresql://r:corpus-argv-dsn-39@db.example/x"], "corpus-argv-dsn-39"),
]
SHOW_ARGV: list[list[str]] = [
    ["--token-budget", "1000000"],
    ["--max-tokens", "512"],
    ["--bos-token-id", "1"],
    ["--key-dim", "64"],
    ["--num-key-value-heads", "8"],
    ["--tokenizer-name", "corpus-tokenizer"],
    ["--resume", "https://ckpt.example/run/step10"],
    ["--pad-token", "<pad>"],
]
SECRETS = [v for _, v in REDACT_NAMED] + [s for *_, s in REDACT_INSIDE]
ARGV_SECRETS = [s for _, s in REDACT_ARGV]


def corpus_config() -> dict[str, Any]:
    """A run config holding both corpora, flat and nested (a DSN two levels down)."""
    flat: dict[str, Any] = dict(REDACT_NAMED)
    flat.update({name: value for name, value, _ in REDACT_INSIDE})
    flat.update(SHOW)
    return {**flat, "model": {"tokenizer": {"pad_token": "<pad>"}, "db": dict(flat)}}


def corpus_argv() -> list[str]:
    return [a for argv, _ in REDACT_ARGV for a in argv] + [a for argv in SHOW_ARGV for a in argv]


def corpus_env() -> dict[str, str]:
    """Both corpora as environment variables (every name above is a valid one)."""
    env = {name: value for name, value in REDACT_NAMED}
    env.update({name: value for name, value, _ in REDACT_INSIDE})
    env.update({name: str(value) for name, value in SHOW})
    return env


def assert_hidden(text: str, secrets: Iterable[str] = (*SECRETS, *ARGV_SECRETS)) -> None:
    leaked = [s for s in secrets if s in text]
    assert not leaked, f"leaked: {leaked}"


def assert_shown_config(config: dict[str, Any]) -> None:
    for name, value in SHOW:
        assert config[name] == value, name
        assert config["model"]["db"][name] == value, name
    assert config["model"]["tokenizer"] == {"pad_token": "<pad>"}
    for name, value, secret in REDACT_INSIDE:
        # The secret goes; the rest of the string (scheme, host, path) stays readable.
        assert secret not in config[name] and config[name].split("//")[0] in value, name


def assert_shown_argv(argv: list[str]) -> None:
    joined = "\0".join(argv)
    for shown in SHOW_ARGV:
        assert "\0".join(shown) in joined, shown
    for args, _ in REDACT_ARGV:
        assert args[0].split("=")[0] in joined  # the option stays, its value goes


def assert_env(env: dict[str, Any]) -> None:
    for name, value in SHOW:
        assert env[name] == str(value), name
    for name, _ in REDACT_NAMED:
        assert env[name].startswith("<redacted sha256:"), name


# -- the rule itself -----------------------------------------------------------------------
# Each table is walked whole and every entry that gets the wrong answer is listed at once.
def spellings(name: str) -> list[str]:
    """The ways one name is written: as it is, upper case, an option, a dotted key."""
    return [name, name.upper(), f"--{name.replace('_', '-')}", f"train.{name}"]


def test_must_redact_names() -> None:
    wrong = [v for name, _ in REDACT_NAMED for v in spellings(name) if not is_secret_name(v)]
    assert not wrong, f"not taken for secrets: {wrong}"
    for name, value in REDACT_NAMED:
        assert_hidden(json.dumps(redact_config({name: value, "deep": [{name: value}]})), [value])
        assert_hidden(json.dumps(redact_env({name: value})), [value])


def test_pwd_is_a_password_but_the_shells_working_directory_is_shown() -> None:
    assert all(is_secret_name(name) for name in ("pwd", "--pwd", "db.pwd", "Pwd", "BEARER"))
    assert not is_secret_name("PWD") and not is_secret_name("OLDPWD")


def test_must_show_names() -> None:
    wrong = [name for name, _ in SHOW if is_secret_name(name)]
    assert not wrong, f"hyperparameters taken for secrets: {wrong}"
    assert redact_config(dict(SHOW)) == dict(SHOW)
    assert redact_env({k: str(v) for k, v in SHOW}) == {k: str(v) for k, v in SHOW}


def test_secrets_inside_strings_are_hidden_everywhere() -> None:
    wrong = []
    for name, value, secret in REDACT_INSIDE:
        redacted = redact_config({name: value})[name]
        if secret in redacted or redact_config({name: redacted})[name] != redacted:
            wrong.append(name)  # leaked, or not idempotent
        seen = [redact_env({name: value})[name], *redact_argv([value, f"--{name}={value}"])]
        if any(secret in text for text in seen) or secret in json.dumps(redact_config([[value]])):
            wrong.append(name)
    assert not wrong, f"secrets left inside: {wrong}"


def test_secret_command_lines() -> None:
    wrong = []
    for argv, secret in REDACT_ARGV:
        recorded = redact_argv(["python", "train.py", *argv, "--lr", "0.1"])
        if secret in " ".join(recorded) or redact_argv(recorded) != recorded:
            wrong.append(argv)
        assert recorded[:2] == ["python", "train.py"] and recorded[-2:] == ["--lr", "0.1"]
    assert not wrong, f"secrets left on the command line: {wrong}"


def test_hyperparameter_command_lines_are_shown() -> None:
    whole = ["python", "train.py", *corpus_argv()]
    argv = redact_argv(whole)
    assert_hidden("\n".join(argv))
    assert_shown_argv(argv)
    assert argv[-len(SHOW_ARGV) * 2 :] == whole[-len(SHOW_ARGV) * 2 :]


def test_the_whole_config_at_once() -> None:
    config = redact_config(corpus_config())
    assert_hidden(json.dumps(config))
    assert_shown_config(config)


def test_the_document_hides_the_locks_index_credentials() -> None:
    """A lock whose wheels name an index with credentials: the snapshot keeps the URL's
    place, never its password, when written and again when read back."""
    text = 'url = "https://ci:corpus-lock-pw-41@pkgs.example/simple/x-1.0-py3-none-any.whl"\n'
    doc = document(
        probe={},
        profile={"name": "p"},
        lock={"sha256": "0" * 64, "text": text},
        environ={},
        profile_env={},
        command=[],
        target="local",
        git=None,
    )
    assert "corpus-lock-pw-41" not in doc["lock"]["text"]
    assert "@pkgs.example/simple/x-1.0-py3-none-any.whl" in doc["lock"]["text"]


RULE_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import envlock  # the startup API: no real envlock is importable in this interpreter
assert envlock.__file__.startswith(sys.argv[1]), envlock.__file__
rule = envlock.namespace("doc", envlock.SHARED)
corpus = json.load(sys.stdin)
print(json.dumps({
    "names": [rule["is_secret_name"](n) for n in corpus["names"]],
    "config": rule["redact_config"](corpus["config"]),
    "env": rule["redact_env"](corpus["env"]),
    "argv": rule["redact_argv"](corpus["argv"]),
}))
"""


def test_the_startup_api_applies_the_same_rule(tmp_path: Path) -> None:
    """envlock.snapshot() inside a run cannot import envlock: it runs base/secrets.py from
    the startup set (one source file, shipped). The shipped copy, run by the API in a Python
    that has no envlock (-I -S), answers both corpora exactly as envlock does — and that
    answer hides and shows what it must."""
    files = startup_files()
    assert "base/secrets.py" in files
    for rel, data in files.items():
        ast.parse(data.decode(), filename=rel, feature_version=(3, 8))
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    names = [v for name, _ in [*REDACT_NAMED, *SHOW] for v in spellings(name)]
    config, env, argv = corpus_config(), corpus_env(), corpus_argv()
    corpus = {"names": names, "config": config, "env": env, "argv": argv}
    api = tmp_path / "startup" / "envlock_api"
    shipped = subprocess.run(
        [sys.executable, "-I", "-S", "-c", RULE_PROBE, str(api)],
        input=json.dumps(corpus),
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = json.loads(shipped.stdout)
    ours = {
        "names": [is_secret_name(n) for n in names],
        "config": redact_config(config),
        "env": redact_env(env),
        "argv": redact_argv(argv),
    }
    assert theirs == ours
    assert_hidden(shipped.stdout)
    assert_shown_config(theirs["config"])
    assert_shown_argv(theirs["argv"])
    assert_env(theirs["env"])


# -- every path, end to end ------------------------------------------------------------------
class Project:
    """An applied seed project whose [env] holds both corpora (a DSN in [env] included)."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.profile = write_seed_project(
            work / "p", build_wheelhouse(work / "wheelhouse"), env=corpus_env()
        )
        for args in (("lock", self.profile), ("apply", "-y", self.profile)):
            result = run_envlock(*args)
            assert result.returncode == 0, result.stderr

    def envlock(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        result = run_envlock(*args)
        assert result.returncode in (0, 1), f"{result.returncode}\n{result.stderr}"
        return result


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return Project(tmp_path_factory.mktemp("secrets"))


def recorded(directory: Path) -> tuple[str, dict[str, Any]]:
    text = (directory / "envlock-snapshot.json").read_text()
    return text, json.loads(text)


def test_snapshot_cli(project: Project, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(corpus_config()))
    made = project.envlock("snapshot", "--config", config, project.profile, tmp_path / "ckpt")
    text, data = recorded(tmp_path / "ckpt")
    assert_hidden(text + made.stdout + made.stderr)
    assert_shown_config(data["config"])
    assert_env(data["env"])


def test_run_snapshot_into(project: Project, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    argv = ["python", "-c", "pass", *corpus_argv()]
    ran = project.envlock("run", project.profile, "--snapshot-into", ckpt, "--", *argv)
    assert ran.returncode == 0, ran.stderr
    text, data = recorded(ckpt)
    assert_hidden(text + ran.stdout + ran.stderr)
    assert_shown_argv(data["command"])
    assert data["command"][:3] == ["python", "-c", "pass"]
    assert_env(data["env"])


API_SCRIPT = """
import json, sys
import envlock
assert envlock.__file__.endswith("envlock_api/envlock/__init__.py"), envlock.__file__
with open(sys.argv[2]) as handle:
    config = json.load(handle)
print(envlock.snapshot(sys.argv[1], config=config))
"""


def test_the_in_process_api(project: Project, tmp_path: Path) -> None:
    """envlock.snapshot() in a training script under `envlock run`: the stdlib-only API runs
    base/secrets.py itself, in the generation's own interpreter."""
    script = tmp_path / "train.py"
    script.write_text(API_SCRIPT)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(corpus_config()))
    ckpt = tmp_path / "ckpt"
    argv: list[str | Path] = ["python", script, ckpt, config, *corpus_argv()]
    ran = project.envlock("run", project.profile, "--", *argv)
    assert ran.returncode == 0, ran.stderr
    text, data = recorded(ckpt)
    assert_hidden(text + ran.stdout + ran.stderr)
    assert_shown_config(data["config"])
    assert_shown_argv(data["process"]["argv"])
    assert_shown_argv(data["command"])
    assert_env(data["env"])


def raw_snapshot(project: Project, directory: Path, shift: int) -> Path:
    """A snapshot as an old envlock (or a hand) wrote it: the corpora raw in its config, env,
    command line and process argv. `shift` changes every value, so a diff shows each."""
    made = project.envlock("snapshot", project.profile, directory)
    assert made.returncode == 0, made.stderr
    _, data = recorded(directory)

    def changed(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            return value
        return value + shift if not isinstance(value, str) else f"{value}{'+' * shift}"

    config = {k: changed(v) for k, v in corpus_config().items() if k != "model"}
    data["config"] = config
    data["env"] = {k: changed(v) for k, v in corpus_env().items()}
    argv = ["python", "train.py", *corpus_argv(), "--step", str(shift)]
    data["command"] = argv
    data["process"] = {"rank": 0, "local_rank": None, "world_size": 1, "from": "default"}
    data["process"]["argv"] = argv
    (directory / "envlock-snapshot.json").write_text(json.dumps(data))
    return directory


@pytest.fixture(scope="module")
def raw_pair(project: Project, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("raw")
    return raw_snapshot(project, base / "a", 0), raw_snapshot(project, base / "b", 1)


def shown_changes(result: subprocess.CompletedProcess[str]) -> dict[str, tuple[Any, Any]]:
    data = json.loads(result.stdout)
    return {c["key"]: (c["a"], c["b"]) for g in data["groups"] for c in g["changes"]}


@pytest.mark.parametrize("form", ["files", "directories"])
def test_diff_of_snapshots(project: Project, raw_pair: tuple[Path, Path], form: str) -> None:
    a, b = raw_pair
    if form == "files":
        a, b = a / "envlock-snapshot.json", b / "envlock-snapshot.json"
    human = project.envlock("diff", a, b)
    as_json = project.envlock("diff", "--json", a, b)
    assert human.returncode == as_json.returncode == 1
    plus = [f"{s}+" for s in (*SECRETS, *ARGV_SECRETS)]
    assert_hidden(human.stdout + human.stderr + as_json.stdout, (*SECRETS, *ARGV_SECRETS, *plus))
    changes = shown_changes(as_json)
    for name, value in SHOW:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            continue
        moved = value + 1 if not isinstance(value, str) else f"{value}+"
        assert changes[f"run.{name}"] == (value, moved), name
        assert changes[name] == (str(value), f"{value}+"), name  # the environment group
    for name, _ in REDACT_NAMED:  # a changed secret is reported, its values hidden
        a_value, b_value = changes[f"run.{name}"]
        assert a_value.startswith("<redacted sha256:") and a_value != b_value


TORCH_SAVE = """
import argparse, json, sys, torch
config = json.loads(sys.argv[2])
args = argparse.Namespace(**config)
torch.save({"model": {"w": torch.zeros(2, 2)}, "args": args, "config": config, "step": 10},
           sys.argv[1])
"""


@pytest.fixture(scope="module")
def checkpoints(
    project: Project, torch_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """Two checkpoint dirs: a torch.save file whose args and config hold both corpora, and
    a config.json beside it; no snapshot, so only the checkpoint's own data is compared."""
    base = tmp_path_factory.mktemp("ckpt")
    dirs = []
    for name, shift in (("a", 0), ("b", 1)):
        directory = base / name
        directory.mkdir()
        config = {k: v for k, v in corpus_config().items() if k != "model"}
        config = {k: v + shift if isinstance(v, int) else v for k, v in config.items()}
        config.update({k: f"{v}{'+' * shift}" for k, v in REDACT_NAMED})
        subprocess.run(
            [str(torch_python), "-c", TORCH_SAVE, str(directory / "step10.pt"), json.dumps(config)],
            check=True,
        )
        (directory / "config.json").write_text(json.dumps(config))
        dirs.append(directory)
    return dirs[0], dirs[1]


@pytest.mark.parametrize("form", ["directories", "files"])
def test_diff_of_checkpoints_gives_one_answer(
    project: Project, checkpoints: tuple[Path, Path], form: str
) -> None:
    """The same checkpoint's secrets are hidden whether diff is given its directory or the
    checkpoint file; its hyperparameters are shown either way."""
    a, b = checkpoints
    if form == "files":
        a, b = a / "step10.pt", b / "step10.pt"
    as_json = project.envlock("diff", "--json", a, b)
    human = project.envlock("diff", a, b)
    assert as_json.returncode == human.returncode == 1, as_json.stderr
    plus = [f"{v}+" for _, v in REDACT_NAMED]
    assert_hidden(as_json.stdout + human.stdout + human.stderr, (*SECRETS, *plus))
    changes = shown_changes(as_json)
    for prefix in ("checkpoint.args", "checkpoint.config"):
        for name, value in SHOW:
            if isinstance(value, int) and not isinstance(value, bool):
                assert changes[f"{prefix}.{name}"] == (value, value + 1), name
        for name, _ in REDACT_NAMED:
            assert changes[f"{prefix}.{name}"][0].startswith("<redacted sha256:"), name
    if form == "directories":
        assert changes["config.json: token_budget"] == (1_000_000, 1_000_001)


def test_inspect_shows_the_config_without_its_secrets(
    project: Project, checkpoints: tuple[Path, Path]
) -> None:
    a, _ = checkpoints
    for path in (a / "step10.pt", a):
        human = project.envlock("inspect", path)
        as_json = project.envlock("inspect", "--json", path)
        assert human.returncode == as_json.returncode == 0, human.stderr
        assert_hidden(human.stdout + human.stderr + as_json.stdout)
        assert "token_budget = 1000000" in human.stdout and '"<pad>"' in human.stdout
    config = json.loads(project.envlock("inspect", "--json", a / "step10.pt").stdout)["config"]
    assert config["config"]["bos_token_id"] == 1
    assert config["config"]["hf_token"].startswith("<redacted sha256:")


def test_loading_hides_what_old_snapshots_hold(raw_pair: tuple[Path, Path]) -> None:
    """Every reader of a snapshot goes through load_snapshot: raw values come out hidden."""
    data = load_snapshot(raw_pair[0])
    assert_hidden(json.dumps(data))
    assert_shown_argv(data["process"]["argv"])
    assert_shown_argv(data["command"])
    for name, value in SHOW:
        assert data["config"][name] == value, name


# -- a private index's credentials never reach uv's argv -----------------------------------
INDEX_USER, INDEX_PASSWORD = "ci", "corpus-index-pw-51"
EXTRA_PASSWORD = "corpus-extra-pw-52"


class AuthIndex:
    """A PEP 503 index on loopback that answers only with the right Basic credentials."""

    def __init__(self, root: Path, wheels: list[Path]) -> None:
        write_simple_index(root, wheels)
        self.allowed = {
            "Basic " + base64.b64encode(f"{INDEX_USER}:{pw}".encode()).decode()
            for pw in (INDEX_PASSWORD, EXTRA_PASSWORD)
        }
        index = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Authorization") not in index.allowed:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="index"')
                    self.end_headers()
                    return
                super().do_GET()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, password: str) -> str:
        return f"http://{INDEX_USER}:{password}@127.0.0.1:{self.server.server_port}/simple"


RECORDING_UV = """#!/bin/sh
# Records what the kernel shows every user of this uv process, then becomes the real uv.
tr '\\0' '\\n' < /proc/$$/cmdline > "{log}/$$.argv"
tr '\\0' '\\n' < /proc/$$/environ > "{log}/$$.environ"
exec {uv} "$@"
"""


def test_index_credentials_reach_uv_through_its_environment(tmp_path: Path) -> None:
    wheels = [w for w in build_wheelhouse(tmp_path / "wh").glob("tinydep-1.0-*.whl")]
    index = AuthIndex(tmp_path / "index", wheels)
    try:
        log = tmp_path / "uv-log"
        log.mkdir()
        wrapper = tmp_path / "uv"
        wrapper.write_text(RECORDING_UV.format(log=log, uv=shlex.quote(uv_path())))
        wrapper.chmod(0o755)
        profile = tmp_path / "p" / "private.toml"
        profile.parent.mkdir()
        profile.write_text(
            "\n".join(
                [
                    '[profile]\nname = "private"\n',
                    '[target]\ntype = "local"\nroot = "root"\n',
                    '[python]\nversion = "3.11"\n',
                    "[dependencies]",
                    'packages = ["tinydep==1.0"]',
                    f'index-url = "{index.url(INDEX_PASSWORD)}"',
                    f'extra-index-urls = ["{index.url(EXTRA_PASSWORD)}"]',
                    "",
                ]
            )
        )
        # No cache: every download must authenticate, at lock and at apply alike.
        env = {**os.environ, "ENVLOCK_UV": str(wrapper), "UV_NO_CACHE": "1"}
        locked = run_envlock("lock", profile, env=env)
        assert locked.returncode == 0, locked.stderr
        applied = run_envlock("apply", "-y", profile, env=env)
        assert applied.returncode == 0, applied.stderr
    finally:
        index.server.shutdown()
    started = {}
    for argv in sorted(log.glob("*.argv")):
        seen = argv.read_text()
        assert INDEX_PASSWORD not in seen and EXTRA_PASSWORD not in seen, seen
        environ = argv.with_suffix(".environ").read_text().splitlines()
        # /bin/sh, the wrapper, then uv's own arguments: `pip compile …`, `venv …`, `pip sync …`
        started[" ".join(seen.splitlines()[2:4])] = environ
    # uv compiled (lock), then built the venv and synced it (apply): each one was told the
    # indexes through its environment.
    assert {"pip compile", "pip sync"} <= set(started), sorted(started)
    for what in ("pip compile", "pip sync"):
        assert f"UV_DEFAULT_INDEX={index.url(INDEX_PASSWORD)}" in started[what], what
        assert f"UV_INDEX={index.url(EXTRA_PASSWORD)}" in started[what], what
    # The credentials did their work (the index answers nobody else), and the lock has none.
    lock = (profile.parent / "pylock.private.toml").read_text()
    assert 'name = "tinydep"' in lock
    assert INDEX_PASSWORD not in lock and EXTRA_PASSWORD not in lock
    assert INDEX_PASSWORD not in locked.stdout + locked.stderr


def test_the_torch_backends_credentials_leave_the_resolvers_file(tmp_path: Path) -> None:
    """[torch] index-url with credentials: uv reads them from its per-index variables; the
    pyproject.toml written for uv names the index without them."""
    profile_path = tmp_path / "t.toml"
    profile_path.write_text(
        '[profile]\nname = "t"\n\n[target]\ntype = "local"\nroot = "root"\n\n'
        '[python]\nversion = "3.11"\n\n[torch]\nversion = "2.11.0"\nbackend = "cu128"\n'
        'index-url = "https://me:corpus%2Ftorch-pw-53@mirror.example/whl/cu128"\n'
    )
    from envlock.lock.indexes import uv_index_env  # the module this change adds

    profile = load_profile(profile_path)
    pyproject = resolver_input(profile, [])
    assert "corpus" not in pyproject and "https://mirror.example/whl/cu128" in pyproject
    env = uv_index_env(profile)
    assert env["UV_INDEX_TORCH_BACKEND_USERNAME"] == "me"
    assert env["UV_INDEX_TORCH_BACKEND_PASSWORD"] == "corpus/torch-pw-53"
    argv = uv_compile_argv(profile, tmp_path / "pyproject.toml", tmp_path / "pylock.t.toml", [])
    assert "corpus" not in " ".join(argv)


# -- the remote run's env file: 0600 in a 0700 directory, on a real remote transport ---------
def test_the_remote_env_file_is_private(node_sshd: Node, tmp_path: Path) -> None:
    """`envlock run` on a target writes the command's environment (every --env and pass-env
    value) to <root>/run/<token>.env over the real ssh transport: only its owner may read it,
    whatever umask the target's own shell has."""
    transport = SshSettings(
        host=node_sshd.host,
        user=node_sshd.user,
        port=node_sshd.port,
        identity_file=str(node_sshd.identity_file),
        ssh_options=(
            f"UserKnownHostsFile={node_sshd.known_hosts_file}",
            "GlobalKnownHostsFile=/dev/null",
            "StrictHostKeyChecking=yes",
        ),
    ).transport()
    # Without envlock's own umask the target's would decide: make sure it would leak.
    shell_umask = transport.run(["sh", "-c", "umask"])
    assert shell_umask.ok and int(shell_umask.stdout.strip(), 8) & 0o077 == 0o022 & 0o077
    run_dir = tmp_path / "root" / "run"
    env_file = run_dir / "0123456789abcdef.env"
    spec = remote_spec({"HF_TOKEN": "corpus-env-file-61"}, "/gen/bin", ())
    write_private(transport, str(run_dir), str(env_file), spec)
    assert env_file.read_bytes() == spec
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700


# -- a Proxmox secret file others can read ----------------------------------------------------
# (mode, refused?): group or others may read → refused; only its owner → used.
SECRET_FILE_MODES = [(0o644, True), (0o640, True), (0o604, True), (0o660, True), (0o606, True)]
SECRET_FILE_MODES += [(0o600, False), (0o400, False)]


def test_a_secret_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pve-secret"
    path.write_text("corpus-pve-secret-71\n")
    settings = LxcSettings(ssh=SshSettings("pve1"), secret_file=str(path))
    for mode, refused in SECRET_FILE_MODES:
        path.chmod(mode)
        if not refused:
            assert read_secret(settings) == "corpus-pve-secret-71", f"{mode:04o}"
            continue
        with pytest.raises(UsageError) as info:
            read_secret(settings)
        assert info.value.exit_code == EXIT_USAGE
        assert info.value.message == (
            f"the Proxmox secret file {path} is readable by others (mode {mode:04o}): "
            "its secret may have been copied"
        )
        assert info.value.hint == f"chmod 600 {path}, and rotate the secret if others could read it"
        assert "corpus-pve-secret-71" not in f"{info.value.message} {info.value.hint}"
