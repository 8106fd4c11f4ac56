import sys

from precision_shell.cli import main

sys.exit(main())
