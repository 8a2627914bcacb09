"""Node health: judge a GPU node from the output of the commands that show its health.

`judge.py` is standard library only: golden images ship it as one file with every fabric's and accelerator family's
judge bundled in (goldenenv/fabrics/<name>/health.py, goldenenv/accelerators/<family>/health.py,
goldenenv.images.bundle), with the catalog's rules as JSON
(`goldenenv.catalog.health.rules_document()`), and Slurm's HealthCheckProgram runs it on every node.
"""
