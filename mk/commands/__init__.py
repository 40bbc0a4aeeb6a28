"""Sub-commands of the ``mk`` CLI: one module each, each with ``register(subparsers)``."""
