"""Entry point for the Pulumi CLI (Pulumi.yaml: main: goldenenv/program/)."""

from goldenenv.program import main

main()
