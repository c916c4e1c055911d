"""`python -m matrix.cli`."""

from . import main

main()
