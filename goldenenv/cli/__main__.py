"""`python -m goldenenv.cli`: the same command line as `goldenenv`."""

from goldenenv.cli import app

app()
