"""The Pulumi program (Pulumi.yaml: main: program/): goldenenv's, from the installed package."""

from goldenenv.program import main

main()
