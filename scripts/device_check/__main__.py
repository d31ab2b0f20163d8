"""``python scripts/device_check [--dry-run] [--plan] [OUT_DIR]``: scripts/device_check.sh's
body (check.main)."""

import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)   # scripts/: the package device_check

from device_check.check import main  # noqa: E402

sys.exit(main())
