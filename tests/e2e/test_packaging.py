"""The installed package works without the repository: a wheel in a fresh virtual environment.

The wheel is built from this checkout (``pip wheel``), installed with ``--no-deps`` into a
venv that sees the dependencies already installed for the interpreter running the tests, and
used from a directory outside the repository: the configs must come from the package
(``pkg://nmt.configs``), not from ``configs/`` beside the code.

The venv sees those dependencies through a ``.pth`` file that adds the running interpreter's
site directories (``site.getsitepackages()``, and the user site when it is on) after the
venv's own, as ``--system-site-packages`` would. That flag alone would not do: from inside a
virtual environment it shows the base interpreter's packages, not the ones installed into
the environment the tests run from. The same file works on a system interpreter.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, write_corpus
from test_readme import sliced_main_job

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    # Build from a copy: setuptools writes build/ and *.egg-info/ beside the sources.
    source = root / "source"
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(
        ".git", "runs", "sweeps", "outputs", "multirun", "build", "dist", "*.egg-info",
        "__pycache__", ".pytest_cache", ".ruff_cache", ".venv", "venv"))
    # Without build isolation where setuptools is at hand (fast, offline); a fresh venv of
    # Python >= 3.12 has none, and pip then fetches it as for the README's install.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation,
                    "-q", "-w", str(root / "dist"), str(source)], check=True, timeout=300)
    wheels = list((root / "dist").glob("nmt-*.whl"))
    assert len(wheels) == 1
    env_dir = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True,
                   timeout=120)
    python = str(env_dir / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    user_site = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    outer = [*site.getsitepackages(), *user_site]
    Path(purelib, "_outer_site.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in outer) + "\n")
    # The venv's python runs pip from the outer site (it has none of its own): it installs
    # into the venv.
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    str(wheels[0])], check=True, timeout=300)
    return env_dir


def _env(venv: Path) -> dict[str, str]:
    path = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, "VIRTUAL_ENV": str(venv), "CI": "1", "OMP_NUM_THREADS": "1"}


def test_wheel_ships_configs_and_runs_outside_the_repository(venv, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import nmt, nmt.configs; print(nmt.__file__); "
                            "print(nmt.configs.__file__)"],
                           cwd=outside, env=_env(venv), capture_output=True, text=True, timeout=60)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(venv)) for line in where.stdout.split()), where.stdout
    help_ = subprocess.run(["nmt-train", "--help"], cwd=outside, env=_env(venv),
                           capture_output=True, text=True, timeout=60)
    assert help_.returncode == 0 and "model: rnn, transformer" in help_.stdout

    # The README's main command, sliced, from outside the repository with the installed package.
    corpus = write_corpus(tmp_path / "corpus", {"train": 200, "val": 12, "test_2016_flickr": 12})
    run_dir = tmp_path / "run"
    proc = subprocess.run(sliced_main_job(tmp_path, corpus, run_dir), cwd=outside, env=_env(venv),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert (run_dir / "checkpoints" / "best.pt").is_file()
    assert (run_dir / "eval" / "test_2016_flickr" / "scores.json").is_file()
    assert "| transformer | de->en |" in proc.stdout
