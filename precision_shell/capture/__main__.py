"""``python -m precision_shell.capture``: see :mod:`.runner`."""

import sys

from .runner import main

sys.exit(main())
