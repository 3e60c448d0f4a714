import sys

from tfgpu.cli import main

sys.exit(main())
