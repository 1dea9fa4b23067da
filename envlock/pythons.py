"""How envlock starts a Python for its own work (agent, probe, launcher, installer): one place.

envlock runs as root in environments others can write into and in directories others can
write (`/workspace`, `/tmp`). So its own interpreters start isolated: `-I` (no user site, no
PYTHON* variables, no script or working directory on sys.path) and `-S` (no `site`: no
`.pth` file and no sitecustomize/usercustomize runs, site-packages is not on sys.path), in
`/` as their working directory. The user's command under `envlock run` is not started here:
it keeps its normal environment.

Everything goes through one `sh` line, the same on every transport (local, ssh, pct): it
picks the interpreter, changes to `/` and execs. The environment's own interpreter
(`<root>/current/bin/python`) is used only while its real file lies outside the root: a
venv's python is a link to a base interpreter, so a binary inside the root was planted
there; the target's system python runs instead, and the probe reports the interpreter.

Under `-S` the interpreter's `sys.prefix` is the base one (venv detection is site.py's
work): the probe derives the environment from `sys.executable` (agent/probe.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envlock.targets.base import Transport

# What makes an interpreter envlock's own: see the module docstring.
ISOLATION = ("-I", "-S")

# argv after `sh -c START sh`: the root ("" for none), the fallback python, the program,
# then the program's arguments. The root and every argument are data ("$1", "$@"), never
# code. `readlink -f` resolves every link of the chain, as the kernel's exec will.
START = (
    'root=$1 python=$2 program=$3; shift 3; if [ -n "$root" ]; then '
    'p="$root/current/bin/python"; '
    'if real=$(readlink -f "$p") && top=$(readlink -f "$root") '
    '&& [ -f "$real" ] && [ -x "$real" ]; then '
    'case "$real" in "$top"/*) ;; *) python=$p ;; esac; fi; fi; '
    'cd / && exec "$python" ' + " ".join(ISOLATION) + ' -c "$program" "$@"'
)


def own_python(
    transport: Transport, program: str, *args: str, root: str | None = None
) -> list[str]:
    """The argv that runs `program` (Python source) in an isolated interpreter on the
    transport's machine, with `args` as its sys.argv[1:]; with `root`, the environment's own
    interpreter when it may be trusted, else the target's system python."""
    return ["sh", "-c", START, "sh", root or "", transport.system_python, program, *args]
