"""The one error of a model file that cannot be used as it is."""

from __future__ import annotations

from ledger.inputs import InputFileError


class ModelFileError(InputFileError):
    """A model file refused before parsing: it names the file and the check it failed, never its content."""
