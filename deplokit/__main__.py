"""`python -m deplokit`: the deplokit command line."""
import sys

from .cli import main

sys.exit(main())
