"""``python -m prism_memory``."""

import sys

from .cli import main

sys.exit(main())
