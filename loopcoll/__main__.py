"""``python -m loopcoll`` runs the CLI."""

import sys

from loopcoll.cli import main

sys.exit(main())
