"""``python -m symgrad`` runs ``symgrad check`` on the shipped example models."""

import sys

from .cli import main

sys.exit(main())
