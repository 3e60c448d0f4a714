"""``python -m tfgpu.cli``: the same command line as ``tfgpu``."""

import sys

from tfgpu.cli import main

sys.exit(main())
