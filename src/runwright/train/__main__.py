"""`python -m runwright.train`: the reference GPT trainer (see loop.py)."""

import sys

from runwright.train.loop import main

sys.exit(main())
