"""End-to-end tests of the `floe` binary: real processes, real files."""

import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def floe_bin() -> pathlib.Path:
    """Builds the `floe` binary (debug) once per session and returns its path."""
    subprocess.run(["cargo", "build", "--quiet", "--bin", "floe"], cwd=ROOT, check=True)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    path = target / "debug" / "floe"
    assert path.exists(), path
    return path
