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
    if req.get("terminal"):
        start_in_terminal(req["spec"], req["argv"], req["terminal"], req.get("refused"))
    start(req["spec"], req["argv"], req.get("refused"))


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


def start(spec, argv, refused=None):
    """Become the command (never returns), in its own process group when stdin is no
    terminal, said on stdout first (the target the controller forwards signals to); one
    that cannot start is said in `refused` too (agent/start.py)."""
    env = command_env(spec)
    target = own_group()
    # Once the target is said, the controller forwards the signals it kept to it, maybe
    # before the exec: SIGINT then ends the agent as it would the command, by the signal,
    # not by Python's KeyboardInterrupt and its traceback (an ignored SIGINT stays ignored).
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    os.write(1, (json.dumps({"run": {"target": target}}) + "\n").encode())
    become(argv, env, refused)


def start_in_terminal(spec, argv, terminal, refused=None):
    """The command of a run from a terminal, in a terminal of its own made here (the
    controller's is raw meanwhile: keys and output pass as bytes, once): the command's
    session and process group lead it, Ctrl-C there is its SIGINT. Relayed until it ends;
    exits with its status (a shell's 128 + N when a signal ended it). Never returns, unless
    the target has no terminal to give: then the command starts as a batch run's."""
    import pty

    env = command_env(spec)
    sys.stdout.flush()
    try:
        pid, master = pty.fork()
    except OSError as exc:  # a target without terminals to give (no devpts, none left)
        sys.stderr.write(
            f"envlock: no terminal for the command on the target ({exc}): it runs without one\n"
        )
        sys.stderr.flush()
        return
    if pid == 0:  # the command's side: stdin, stdout and stderr are the new terminal
        set_size(0, terminal)
        become(argv, env, refused)
    said = {"run": {"target": f"-{pid}", "terminal": True}}
    os.write(1, (json.dumps(said) + "\n").encode())
    relay_terminal(master)
    _, status = os.waitpid(pid, 0)
    os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))


def set_size(fd, terminal):
    """The controller's terminal size on ours (rows, columns), when it has one."""
    import fcntl
    import struct
    import termios

    rows, cols = int(terminal.get("rows") or 0), int(terminal.get("cols") or 0)
    if rows and cols:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def relay_terminal(master):
    """Our stdin into the terminal, its output to our stdout, until the command's side of
    it is closed (EIO: the command and all it started there ended)."""
    import select

    inputs = [0, master]
    while True:
        ready = select.select(inputs, [], [])[0]
        if master in ready:
            try:
                data = os.read(master, 1 << 16)
            except OSError:
                data = b""
            if not data:
                return
            write_all(1, data)
        if 0 in ready:
            data = os.read(0, 1 << 16)
            if data:
                write_all(master, data)
            else:
                inputs.remove(0)  # the controller's stdin ended: output still comes


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def install_startup(startup):
    """The startup set the request carries, when the target lacks it (agent/start.py)."""
    if not install_startup_set(startup["dir"], startup["version"], startup["files"]):
        raise AgentError("run", "the startup files arrived corrupted")


COMMANDS["run"] = run_command
OWN_STDIN.add("run")
