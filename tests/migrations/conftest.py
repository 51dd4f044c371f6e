"""The prism_memory wheel, built once per session and installed into a fresh virtualenv."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_checked(args: list[str], cwd: Path, timeout: float = 300) -> str:
    """Run ``args`` without this environment's PYTHONPATH; fail the test on a non-zero exit."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="session")
def wheel_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv's python with only the prism_memory wheel installed (deps borrowed)."""
    root = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(root / "dist")]
    if importlib.util.find_spec("hatchling") is not None:
        build.append("--no-build-isolation")
    run_checked([*build, str(REPO)], cwd=root)
    (wheel,) = (root / "dist").glob("prism_memory-*.whl")
    venv = root / "venv"
    run_checked([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    site = Path(
        run_checked(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=root,
        ).strip()
    )
    borrowed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_prism_test_deps.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    run_checked(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        cwd=root,
    )
    located = run_checked(
        [str(python), "-c", "import prism_memory; print(prism_memory.__file__)"], cwd=root
    )
    assert located.strip().startswith(str(site)), located
    return python


@pytest.fixture(scope="session")
def run() -> Callable[..., str]:
    """:func:`run_checked`, for test modules (they cannot import this conftest)."""
    return run_checked
