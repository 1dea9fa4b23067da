"""The agent's `run`: check the target and start the command in one call, in one process.

The controller sends, on stdin, a request framed by its length (so that nothing after it is
read: the rest of stdin is the command's): the probe's request, the sha256 of the state it
judged (`expect`: a state it has seen and found the command may run in), the command's
environment (what envlock sets, the profile's [env], the variables named with `--env` or
`[run] pass-env`: never on a command line), the argv, and the startup set when the target
lacks it. The agent probes; when the state's hash is the one expected, the controller's
judgment holds for exactly this state: the agent installs the startup set if sent, says
`{"run": {"target": …}}` on stdout (the process group signals go to), and execs the
command in this very process. Otherwise it answers the state, starts nothing, and the
controller judges and explains it as after any probe. With `await` (a profile with a
[container], whose API the controller asks meanwhile), it says `{"ready": true}` first and
starts only on the controller's `go`.

The command starts as agent/start.py says, the same rules the launcher of interactive runs
(agent/programs/launcher.py) follows, of which this is the one-call form.
"""

import json
import os
import signal
import sys

if "__envlock_agent__" not in globals():  # in the repository; shipped, one namespace
    from envlock.agent.core import COMMANDS, OWN_STDIN, AgentError, state_digest
    from envlock.agent.probe import probe
    from envlock.agent.start import become, command_env, install_startup_set, own_group

# The request's frame: its length in ASCII digits and a newline, then that many bytes.
MAX_REQUEST = 64 << 20


def read_request(fd=0):
    """The framed request, read to its last byte and not one byte further."""
    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte or len(header) > 20:
            raise AgentError("run", "the request's frame is broken")
        header += byte
    size = int(header)
    if not 0 < size <= MAX_REQUEST:
        raise AgentError("run", f"a request of {size} bytes")
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise AgentError("run", "the request ended early")
        chunks.append(chunk)
        left -= len(chunk)
    return json.loads(b"".join(chunks).decode())


def run_command(_unused):
    req = read_request()
    state = probe(req["probe"])
    if state_digest(state) != req["expect"]:
        return state  # not the state judged: the controller judges this one
    if req.get("await") and not word_to_go():
        return {"stopped": True}  # the controller's last word (the container API's) was no
    if req.get("startup"):
        install_startup(req["startup"])
    start(req["spec"], req["argv"])


def word_to_go():
    """Say the state is as judged and wait for the controller's word (`go`), read byte by
    byte: what follows on stdin is the command's."""
    os.write(1, b'{"ready": true}\n')
    word = b""
    while not word.endswith(b"\n") and len(word) < 8:
        byte = os.read(0, 1)
        if not byte:
            break
        word += byte
    return word == b"go\n"


def start(spec, argv):
    """Become the command (never returns), in its own process group when stdin is no
    terminal, said on stdout first (the target the controller forwards signals to)."""
    env = command_env(spec)
    target = own_group()
    # Once the target is said, the controller forwards the signals it kept to it, maybe
    # before the exec: SIGINT then ends the agent as it would the command, by the signal,
    # not by Python's KeyboardInterrupt and its traceback (an ignored SIGINT stays ignored).
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    os.write(1, (json.dumps({"run": {"target": target}}) + "\n").encode())
    become(argv, env)


def install_startup(startup):
    """The startup set the request carries, when the target lacks it (agent/start.py)."""
    if not install_startup_set(startup["dir"], startup["version"], startup["files"]):
        raise AgentError("run", "the startup files arrived corrupted")


COMMANDS["run"] = run_command
OWN_STDIN.add("run")
