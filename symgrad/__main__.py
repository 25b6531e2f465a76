"""``python -m symgrad``: the ``symgrad`` command (check / info / plot); without arguments it runs
``symgrad check --example lenet``."""

import sys

from .cli import main

sys.exit(main())
