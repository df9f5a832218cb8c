"""What ends an export early: a reason the page and the API show as is."""


class ExportFailed(Exception):
    """The export cannot go on; the message says why in words (no secret in it)."""


class ExportCancelled(Exception):
    """Someone cancelled the export while it ran."""
