"""The `farebox` subcommands that report: each takes `--json` and exits non-zero on a problem."""
