"""`python -m consensus.torture ...`: the same as ``garlicfarm torture ...``."""
import sys

from consensus.torture.run import main

sys.exit(main())
