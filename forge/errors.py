"""Errors in a user's own input: a data file, a corpus file, a profile, a data source. Each message names the file
(and the line and field where there are some); the command line reports one as that message and exit status 2,
without a traceback (forge/cli.py), since the fix is in the file, not in Forge."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input, named in the message by file, line and field."""
