"""``python -m statestore``: the same as the ``statestore`` command."""

import sys

from statestore.cli import main

sys.exit(main())
