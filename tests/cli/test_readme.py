"""The README agrees with the code: it stays short, its exit-code table is the code's (every
status envlock uses, and no other), its links into the site lead to pages, and its
transcript is what the commands print. The transcripts that moved to the site are checked
by tests/cli/test_docs.py, the same way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.transcripts import (
    README,
    bare,
    blocks_of,
    console_blocks,
    reference_generator,
    run_block,
    seed_project,
    transcript_env,
)

MAX_LINES = 250


def test_the_readme_is_short() -> None:
    """Issue #43: the maintainers' material lives in the site, not the README."""
    assert len(README.read_text().splitlines()) <= MAX_LINES


def test_the_exit_code_table_matches_the_code() -> None:
    text = README.read_text()
    table = text.split("(`tests/cli/test_readme.py` checks this table against the code):", 1)[1]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table.split("\n\n", 2)[1], re.M)}
    # the statuses of errors.py and run's launcher, as the site's generated page lists them
    assert documented == set(reference_generator().exit_codes())


def test_every_link_leads_somewhere() -> None:
    """Relative links (into docs/, mostly) name files of the repository, and an anchor into
    a page names one of its headings."""
    for target in re.findall(r"\]\(([^)]+)\)", README.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        page = README.parent / path
        assert page.is_file(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-") for h in headings}
            assert anchor in slugs, target


def test_it_says_how_to_install_the_cli_as_a_tool() -> None:
    text = README.read_text()
    for command in ("uv tool install .", "pipx install .", "uv build", "_ENVLOCK_COMPLETE="):
        assert command in text, command


# -- the README's console transcript is what the commands print ----------------------------
SEED = "$ envlock apply -y train.toml"
RUN = (SEED,)


def test_every_console_transcript_is_run() -> None:
    firsts = [bare(block[0]) for block in console_blocks(README)]
    assert sorted(firsts) == sorted(RUN), "add the new transcript to RUN"


@pytest.fixture(scope="module")
def transcript_project(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    return seed_project(tmp_path_factory.mktemp("readme"), wheelhouse)


def test_the_failure_it_prevents_transcript(transcript_project: Path, wheelhouse: Path) -> None:
    (block,) = blocks_of(SEED, README)
    run_block(block, transcript_project.parent, transcript_env(wheelhouse))
