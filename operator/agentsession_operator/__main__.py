"""`python -m agentsession_operator`: see cli.py."""

from agentsession_operator.cli import main

main()
