"""`python -m gateway` is the `farebox` command."""

from gateway.cli import main

main()
