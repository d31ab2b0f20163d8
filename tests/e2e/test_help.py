"""Every tool's ``--help`` stays fast: it loads neither torch nor the optional tools."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO_ROOT

pytestmark = pytest.mark.slow
TOOLS = ("train", "evaluate", "translate", "plot", "average", "align", "export", "serve",
         "import_model")


@pytest.mark.parametrize("tool", TOOLS)
def test_help_loads_no_torch(tool):
    code = (f"import contextlib, io, sys\nfrom nmt.cli.{tool} import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    status = main(['--help'])\n"
            "assert status == 0 and out.getvalue().startswith('nmt-'), out.getvalue()[:200]\n"
            "print(sorted(m for m in ('torch', 'matplotlib', 'sentencepiece', 'nmt.extras', "
            "'fastapi', 'uvicorn') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
