"""`python -m fsr` is the `fsr` command."""

import sys

from fsr.cli import main

sys.exit(main())
