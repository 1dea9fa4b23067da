"""`python -m pip` in an envlock generation: its bin/pip (envlock's shim) answers.

Each generation carries this module in .envlock/api/startup/pipshim, which a .pth appends
to sys.path: a real pip the lock installs comes first. Compatible with Python 3.8+."""

import os
import sys

if __name__ == "__main__":
    shim = os.path.join(sys.prefix, "bin", "pip")
    os.execv(shim, [shim, *sys.argv[1:]])
