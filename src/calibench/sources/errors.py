"""The error every source raises for input it cannot use (:class:`SourceError`)."""


class SourceError(ValueError):
    """A population's definition or input that cannot be used; names the file, model or key."""
