"""``python -m wcodec``: the ``wcodec`` command line."""

import sys

from .cli import main

sys.exit(main())
