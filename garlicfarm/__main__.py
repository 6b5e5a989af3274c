"""`python -m garlicfarm ...`: the `garlicfarm` command."""
import sys

from garlicfarm.cli import main

sys.exit(main())
