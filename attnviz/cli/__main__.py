"""``python -m attnviz.cli`` (used by ``torchrun``)."""

import sys

from .commands import main

sys.exit(main())
