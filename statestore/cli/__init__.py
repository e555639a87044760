"""The ``statestore`` command line: an application on top of the library, which never imports it.

``main`` is the console script's entry point (and ``python -m statestore``'s); the exit codes are the
CLI's contract with scripts (see ``statestore --help``).
"""

from statestore.cli.errors import (
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PENDING,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
)
from statestore.cli.main import main

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_PENDING",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "main",
]
