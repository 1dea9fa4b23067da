from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import make_torch_venv


@pytest.fixture(scope="session")
def torch_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path to a python interpreter of a real venv with CPU torch installed (built once)."""
    return make_torch_venv(tmp_path_factory.mktemp("torchenv") / "venv")
