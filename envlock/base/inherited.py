"""What envlock inherits is input, and untrusted: the environment of every process envlock
starts for its own work (agent, probe, uv, launcher) is decided in one place.

`decide_environment()`, at envlock's entry (envlock/cli.py), replaces envlock's own environment with
`own_environment`'s and keeps what it was given for the one thing that is the user's: the
command under `envlock run` (`given()`), whose environment is as the caller made it.

The rule is written once, in the agent (envlock/agent/core.py: `own_environment`,
`uv_environment`), which decides the environment of the uv it runs on a target with it:
HOME and the XDG/uv directory variables are kept only while they name directories of the
running user (or root) that no one else may write; HOME is otherwise the password
database's. `UV_*`/`PIP_*` pass only from the allow-list (`PASSED_UV_PIP`, listed on the
docs' Security page). uv reads no configuration file (`UV_NO_CONFIG`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from envlock.agent.core import PASSED_UV_PIP, own_environment, uv_environment

__all__ = ["PASSED_UV_PIP", "decide_environment", "given", "own_environment", "uv_environment"]

_GIVEN: dict[str, str] | None = None


def decide_environment() -> None:
    """envlock's own environment from here on: `own_environment`'s (once, at the entry)."""
    global _GIVEN
    if _GIVEN is None:
        _GIVEN = dict(os.environ)
    decided = own_environment(_GIVEN)
    for name in [name for name in os.environ if name not in decided]:
        del os.environ[name]
    os.environ.update(decided)


def given() -> Mapping[str, str]:
    """The environment envlock was started with: the base of the user's command under run."""
    return os.environ if _GIVEN is None else _GIVEN
