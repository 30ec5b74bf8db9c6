"""``python -m zoo``: the ``zoo`` command."""

from zoo.cli import main

raise SystemExit(main())
