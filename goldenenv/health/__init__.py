"""Node health: judge a GPU node from the output of the commands that show its health.

`judge.py` is standard library only: golden images ship it alone, with the catalog's rules as JSON
(`goldenenv.catalog.health.rules_document()`), and Slurm's HealthCheckProgram runs it on every node.
"""
