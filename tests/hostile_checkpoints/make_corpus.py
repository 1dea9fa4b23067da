"""Generate the hostile checkpoint corpus: files built to hang, exhaust, crash or fool `inspect`.

    python tests/hostile_checkpoints/make_corpus.py DEST   # writes every case under DEST

tests/checkpoint/test_hostile.py builds it into a temporary directory and runs the real CLI on each
case. Pickles are written opcode by opcode (pickle.dumps cannot express most of them); no torch
is needed. Each `Case` says what inspect must do: describe it (exit 0) or refuse it (exit 3),
which text must or must not reach the output, and which canary file must never appear.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.hostile_checkpoints import file_cases, pickle_cases
from tests.hostile_checkpoints.assemble import CASES, Case

__all__ = ["CASES", "Case", "build"]
_REGISTERED = (pickle_cases, file_cases)  # importing them fills CASES


def build(dest: Path) -> dict[str, Case]:
    """Write every case under `dest` (an empty directory); their descriptions by name."""
    dest.mkdir(parents=True, exist_ok=True)
    pickle_cases.raw_pickle(dest)  # other cases link to it
    return {name: replace(make(dest), name=name) for name, make in CASES.items()}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: make_corpus.py DEST")
    for name, made in build(Path(sys.argv[1])).items():
        print(f"{name:36} exit {made.exit_code}  {made.path}")


if __name__ == "__main__":
    main()
