"""``python -m pipeline.serve``: see :mod:`pipeline.serve.cli`."""
import sys

from .cli import main

sys.exit(main())
