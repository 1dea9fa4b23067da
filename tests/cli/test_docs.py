"""The site (docs/, mkdocs.yml) builds, strictly and offline, and its transcripts are what
the commands print: each ```console block of a page is run (when its first command is in
RUN) or named in NOT_RUN with the reason, so a new transcript cannot go unchecked. Shell
completion, which the site documents, is produced for each shell."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envlock.profile.read import load_profile
from tests.conftest import run_envlock
from tests.projects import torch_profile_text
from tests.remote.docker_fixtures import Engine
from tests.transcripts import (
    NOT_RUN,
    REPO,
    bare,
    blocks_of,
    console_blocks,
    doc_pages,
    run_block,
    seed_project,
    transcript_env,
)

BIN = Path(sys.executable).parent
SEED = "$ envlock apply -y train.toml"
HOLD = "$ envlock rollback train.toml"
ADD = "$ envlock add train.toml sglang --dry-run"
NO_RELEASE = "$ envlock add -y train.toml sglang"
DIFF = "$ envlock run train.toml -- python train.py --lr 3e-4 --ckpt runs/a"
INIT_CONTAINER = (
    "$ envlock init fc.toml --target proxmox-lxc --host pve1 --node pve1 --vmid 200"
    " --api-url https://pve1:8006 --torch 2.11.0 --backend cu128"
)
DOCKER = "$ envlock apply -y box.toml"
RUN = (SEED, HOLD, ADD, NO_RELEASE, DIFF, INIT_CONTAINER, DOCKER)
PAGES = doc_pages()


def test_every_console_transcript_is_run_or_says_why_not() -> None:
    firsts = {bare(block[0]) for block in console_blocks(*PAGES)}
    assert firsts == {*RUN, *NOT_RUN}, "add the new transcript to RUN (or NOT_RUN, with why)"


@pytest.fixture(scope="module")
def transcript_project(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    return seed_project(tmp_path_factory.mktemp("docs"), wheelhouse)


def test_the_failure_it_prevents_transcript(transcript_project: Path, wheelhouse: Path) -> None:
    """The daily loop opens with the README's story: the same block, run again."""
    for block in blocks_of(SEED, *PAGES):
        run_block(block, transcript_project.parent, transcript_env(wheelhouse))


def test_the_rollback_hold_transcript(transcript_project: Path, wheelhouse: Path) -> None:
    """A second generation from another lock, then the page's rollback and check."""
    text = transcript_project.read_text()
    transcript_project.write_text(text.replace("tinydep==1.0", "tinydep==0.9"))
    for step in (("lock", transcript_project), ("apply", "-y", transcript_project)):
        assert run_envlock(*step).returncode == 0
    (block,) = blocks_of(HOLD, *PAGES)
    run_block(block, transcript_project.parent, transcript_env(wheelhouse))


def test_the_add_transcript(tmp_path: Path, pypi_wheelhouse: Path) -> None:
    """train.toml on the suite's mirror of PyPI: torch 2.11.0 (CUDA 13.0) and numpy."""
    project = tmp_path / "demo"
    project.mkdir()
    mirror_profile(project, pypi_wheelhouse)
    (block,) = blocks_of(ADD, *PAGES)
    run_block(block, project, transcript_env(pypi_wheelhouse))

    # Then the same profile on a mirror without sglang 0.5.2: no release fits.
    only_new = tmp_path / "wheels"
    shutil.copytree(pypi_wheelhouse, only_new)
    (old,) = only_new.glob("sglang-0.5.2-*.whl")
    old.unlink()
    mirror_profile(project, only_new)
    (block,) = blocks_of(NO_RELEASE, *PAGES)
    run_block(block, project, transcript_env(only_new))


def mirror_profile(project: Path, wheels: Path) -> Path:
    """train.toml: torch 2.11.0 from the mirror and numpy, locked and applied."""
    profile = project / "train.toml"
    profile.write_text(
        torch_profile_text(
            "train",
            torch="2.11.0",
            backend="pypi",
            packages=("numpy",),
            find_links=(str(wheels),),
            offline=True,
        )
    )
    for step in (("lock", profile), ("apply", "-y", profile)):
        assert run_envlock(*step).returncode == 0
    return profile


def test_the_snapshot_diff_transcript(transcript_project: Path, wheelhouse: Path) -> None:
    """The page's train.py (its ```python block), run twice, then diff."""
    project = transcript_project.parent
    page = REPO / "docs" / "guides" / "snapshots-and-diff.md"
    (script,) = re.findall(r"^```python\n(# train\.py\n.*?)^```", page.read_text(), re.M | re.S)
    (project / "train.py").write_text(script)
    assert run_envlock("apply", "-y", transcript_project).returncode == 0
    (block,) = blocks_of(DIFF, *PAGES)
    run_block(block, project, transcript_env(wheelhouse))


def test_the_pages_train_py_runs_outside_envlock_run_too(
    transcript_project: Path, wheelhouse: Path
) -> None:
    """The page's train.py started by the generation's python itself (an IDE, a notebook, a
    scheduler line): `import envlock` works, the snapshot records the generation and says,
    on stderr and in the document, that the environment was not verified."""
    project = transcript_project.parent
    page = REPO / "docs" / "guides" / "snapshots-and-diff.md"
    (script,) = re.findall(r"^```python\n(# train\.py\n.*?)^```", page.read_text(), re.M | re.S)
    (project / "train.py").write_text(script)
    assert run_envlock("apply", "-y", transcript_project).returncode == 0
    venv = Path(load_profile(transcript_project).target.venv)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("ENVLOCK_", "PYTHONPATH"))}
    argv = [venv / "bin" / "python", "train.py", "--lr", "0.01", "--ckpt", "runs/outside"]
    ran = subprocess.run(argv, cwd=project, env=clean, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    generation = os.path.basename(os.path.realpath(venv))
    assert ran.stderr == (
        "envlock.snapshot(): this process was not started by `envlock run`, so the environment "
        "was not verified against its lock; recorded what this process sees of generation "
        f'{generation} ("verified": false). Start it with `envlock run PROFILE -- …`, or run '
        "`envlock check PROFILE`, for a verified record\n"
    )
    written = json.loads((project / "runs/outside/envlock-snapshot.json").read_text())
    assert written["verified"] is False and written["generation"] == generation
    assert written["profile"]["name"] == "train" and written["config"]["lr"] == 0.01
    assert "tinydep" in written["packages"]
    inside = run_envlock(
        "run",
        transcript_project,
        "--",
        "python",
        project / "train.py",
        "--ckpt",
        project / "runs/in",
    )
    assert inside.returncode == 0 and inside.stderr == "", inside.stderr
    assert json.loads((project / "runs/in/envlock-snapshot.json").read_text())["verified"] is True
    diff = run_envlock("diff", project / "runs/in", project / "runs/outside")
    assert diff.returncode == 1 and "run.lr" in diff.stdout, diff.stdout + diff.stderr


def test_the_first_container_transcript(tmp_path: Path, wheelhouse: Path) -> None:
    """`init` of a proxmox-lxc profile contacts nothing: the page's block runs as shown."""
    (block,) = blocks_of(INIT_CONTAINER, *PAGES)
    run_block(block, tmp_path, transcript_env(wheelhouse))


def test_the_docker_transcript(
    tmp_path: Path, wheelhouse: Path, docker_engine: Engine, docker_image: str
) -> None:
    """The Docker page's profile (its wheelhouse bind-mounted where the page shows
    /srv/wheels) and its block, on the suite's private engine (DOCKER_HOST)."""
    page = REPO / "docs" / "guides" / "docker.md"
    pattern = r'^```toml\n(\[profile\]\nname = "box"\n.*?)^```'
    (toml,) = re.findall(pattern, page.read_text(), re.M | re.S)
    wheels = str(wheelhouse)
    (tmp_path / "box.toml").write_text(toml.replace("/srv/wheels", wheels))
    image = re.findall(r'^image = "(.+)"$', toml, re.M)[0]
    assert docker_engine.docker("tag", docker_image, image).returncode == 0
    env = {**transcript_env(wheelhouse), "DOCKER_HOST": docker_engine.host}
    try:
        assert run_envlock("lock", tmp_path / "box.toml", env=env).returncode == 0
        (block,) = blocks_of(DOCKER, *PAGES)
        run_block(block, tmp_path, env, paths={"/srv/wheels": wheels})
    finally:
        docker_engine.docker("rm", "-f", "box")
        docker_engine.docker("volume", "rm", "-f", "box-envlock")
        docker_engine.docker("rmi", image)


def test_the_speed_table_is_the_one_the_benchmark_results_give() -> None:
    """`make bench` writes bench/results/*.json; the Benchmarks page's table is rendered
    from them (bench/readme_table.py)."""
    bench = REPO / "bench" / "readme_table.py"
    done = subprocess.run([sys.executable, str(bench), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, "run `python bench/readme_table.py` after a benchmark run"


def test_durability_is_measured_under_another_writer_and_the_faster_way_kept() -> None:
    """Issue 41: the generation is made durable by syncing its own files unless syncfs()
    measured faster under a concurrent writer. bench/bench_durability.py measures both,
    idle and beside a 2 GB write, in one run; make_durable does what measured faster."""
    import tempfile

    from envlock.agent.core import make_durable

    results = json.loads((REPO / "bench" / "results" / "durability.json").read_text())
    assert results["writer_gb"] >= 2 and results["files"] > 10_000
    own_files = min(results["writer_own_data_s"], results["writer_fsync_each_s"])
    with tempfile.TemporaryDirectory() as tree:
        kept = make_durable(tree)
    assert kept == ("syncfs" if results["writer_envlock_s"] <= own_files else "fsync")


# -- the site builds, strictly and offline ---------------------------------------------------
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict` (what `make docs` runs): the generated Reference pages
    included, a broken link, a missing page or an unknown anchor fails; nothing in the
    built site loads from the network (no web fonts, no CDN)."""
    site = tmp_path / "site"
    done = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    for name in ("commands", "profile", "drift-kinds", "json", "exit-codes"):
        assert (site / "reference" / f"{name}.html").is_file(), name
    remote = re.compile(r"""<(?:link|script|img)[^>]+(?:href|src)=["']https?://""")
    for page in site.rglob("*.html"):
        assert not remote.search(page.read_text()), page
    for sheet in site.rglob("*.css"):
        assert not re.search(r"url\(['\"]?https?://|@import", sheet.read_text()), sheet


# -- shell completion, as the Installing page documents it ------------------------------------
@pytest.mark.parametrize(
    ("shell", "start"),
    [
        ("bash", "_envlock_completion() {"),
        ("zsh", "#compdef envlock"),
        ("fish", "function _envlock_completion;"),
    ],
)
def test_the_completion_script_is_produced(shell: str, start: str) -> None:
    done = subprocess.run(
        [str(BIN / "envlock")],
        env={**os.environ, "_ENVLOCK_COMPLETE": f"{shell}_source"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(start), done.stdout[:200]
    assert "_ENVLOCK_COMPLETE" in done.stdout
    page = (REPO / "docs" / "getting-started" / "install.md").read_text()
    assert f"_ENVLOCK_COMPLETE={shell}_source envlock" in page


def test_completion_completes_commands_and_options() -> None:
    def complete(*words: str) -> str:
        env = {
            **os.environ,
            "_ENVLOCK_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(("envlock", *words)),
            "COMP_CWORD": str(len(words)),
        }
        done = subprocess.run([str(BIN / "envlock")], env=env, capture_output=True, text=True)
        return done.stdout

    assert "plain,check" in complete("ch").splitlines()
    assert "plain,--strict" in complete("check", "--st").splitlines()
