"""One module per `ndfleet` subcommand, each exposing `register(subparsers)` (ndfleet/cli.py lists them)."""
