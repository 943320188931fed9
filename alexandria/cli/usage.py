"""The CLI's own refusal: arguments that do not go together (exit status 2, as argparse's)."""

from __future__ import annotations

from alexandria.errors import Refused


class UsageError(Refused):
    """Arguments that are missing, malformed or do not go together (exit status 2)."""

    default_code = "USAGE"
