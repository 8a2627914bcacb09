"""`python -m goldenenv`: the same command line as `goldenenv`."""

from goldenenv.cli import app

app(prog_name="goldenenv")
