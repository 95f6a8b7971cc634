"""One module per `ndfleet` subcommand, each exposing `register(subparsers)`."""
