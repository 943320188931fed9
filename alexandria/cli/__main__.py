"""``python -m alexandria.cli …`` behaves exactly as ``alexandria …``."""

import sys

from alexandria.cli import main

sys.exit(main())
