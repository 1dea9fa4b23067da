"""How envlock starts a Python for its own work (agent, probe, launcher, installer): one place.

envlock runs as root in environments others can write into and in directories others can
write (`/workspace`, `/tmp`). So its own interpreters start isolated: `-I` (no user site, no
PYTHON* variables, no script or working directory on sys.path) and `-S` (no `site`: no
`.pth` file and no sitecustomize/usercustomize runs, site-packages is not on sys.path), in
`/` as their working directory. The user's command under `envlock run` is not started here:
it keeps its normal environment.

Everything goes through one `sh` line, the same on every transport (local, ssh, pct): it
picks the interpreter and execs it; the program's first line changes to `/`. The
environment's own interpreter (`<root>/current/bin/python`) is used only from a root that is
this user's (or root's) and writable by no one else, and only while its real file lies
outside the root: a venv's python is a link to a base interpreter, so a binary inside the
root was planted there. Otherwise the target's system python runs, and the probe reports
the interpreter (or who owns the root).

Under `-S` the interpreter's `sys.prefix` is the base one (venv detection is site.py's
work): the probe derives the environment from `sys.executable` (agent/probe.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envlock.targets.base import Transport

# What makes an interpreter envlock's own: see the module docstring.
ISOLATION = ("-I", "-S")

# argv after `sh -c START sh`: the root ("" for none), the fallback python, the program,
# then the program's arguments. The root and every argument are data ("$1", "$@"), never
# code. The root's interpreter is chosen only when
# - the root is this user's or root's and writable by no one else (`mine`: the ownership
#   rule of envlock/base/ownership.py, from `ls -ldn`), judged after `cd -P` into it, and the
#   interpreter is then named relative to it, so that no parent can be swapped in between;
#   after `cd -P`, POSIX sets $PWD to the physical path (what `pwd -P` prints, without
#   the subshell a $(...) forks: one process less on every start);
# - its real file (`readlink -f`: every link of the chain, as the kernel's exec resolves
#   them) is an executable file outside the root (a venv's python links to a base one),
#   and it and every parent are this user's or root's and writable by no one else (`owned`;
#   a parent may be sticky, like /tmp): an adopted venv whose python is another user's
#   never runs as root. Otherwise the target's system python runs the agent.
# The program then changes to `/` itself (PREAMBLE): the interpreter starts in the root.
START = (
    'mine() { f=$1 up=$2; set -- $(ls -ldn -- "$f" 2>/dev/null) ""; case $1 in "") return 1;; '
    '?????????t*) [ -n "$up" ] || return 1;; ?????w*|????????w*) return 1;; esac; '
    '[ "$3" = 0 ] || [ -O "$f" ]; }; '
    'owned() { p=$1; mine "$p" || return 1; while [ "${p%/*}" != "$p" ] && p=${p%/*} '
    '&& [ -n "$p" ]; do mine "$p" up || return 1; done; mine / up; }; '
    "root=$1 python=$2 program=$3; shift 3; cd / || exit 125; "
    'if [ -n "$root" ] && cd -P -- "$root" 2>/dev/null && mine . '
    '&& real=$(readlink -f ./current/bin/python) && [ -f "$real" ] && [ -x "$real" ] '
    '&& owned "$real"; then '
    'case "$real" in "$PWD"/*) cd / ;; *) python=./current/bin/python ;; esac; '
    "else cd /; fi; "
    'exec "$python" ' + " ".join(ISOLATION) + ' -c "$program" "$@"'
)

# Every program starts in `/`, whichever directory its interpreter was started from.
PREAMBLE = "import os as _envlock_os; _envlock_os.chdir('/'); del _envlock_os\n"


def own_python(
    transport: Transport, program: str, *args: str, root: str | None = None
) -> list[str]:
    """The argv that runs `program` (Python source) in an isolated interpreter on the
    transport's machine, with `args` as its sys.argv[1:]; with `root`, the environment's own
    interpreter when it may be trusted, else the target's system python."""
    return ["sh", "-c", START, "sh", root or "", transport.system_python, PREAMBLE + program, *args]


def resolver_python() -> list[str]:
    """uv's options for a resolution (`uv pip compile`, which marks by --python-version and
    --python-platform): the interpreter envlock itself runs on, and no other. Left to find
    one, uv runs every `python3.X`, `python3` and `python` on PATH to ask its version (a PATH
    entry of another user's included) and looks in its managed directory; the interpreter a
    generation is built on is chosen by the agent (agent/core.py's `owned_python`)."""
    return [
        "--python",
        sys.executable,
        "--python-preference",
        "only-system",
        "--no-python-downloads",
    ]
