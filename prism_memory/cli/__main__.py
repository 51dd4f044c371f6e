"""``python -m prism_memory.cli``: the same commands as ``python -m prism_memory``."""

import sys

from . import main

sys.exit(main())
