"""The two sides of an export kind: ``ExportKind``, what a kind of job is (the registry
of kinds is ``evals.bulk_export.kinds``), and ``Progress``, what a running job reports to."""

from __future__ import annotations

from agentops.errors import InvalidRequest


class Progress:
    """What a running export reports: ``log`` a line, ``rows`` written so far of a table
    (checks for a cancel too), ``file`` written. Implemented by the runner."""

    def log(self, line: str) -> None:
        raise NotImplementedError

    def rows(self, table: str, rows: int) -> None:
        raise NotImplementedError

    def file(self, entry: dict) -> None:
        raise NotImplementedError


class ExportKind:
    kind = ""
    label = ""
    destination_kinds: tuple[str, ...] = ()
    # Whether the job covers a range of days (start_date and end_date are required).
    uses_dates = False

    def clean_tables(self, tables: list[str]) -> list[str]:
        return []

    def clean_options(self, project, options: dict) -> dict:
        """The options as stored, or ``InvalidRequest`` naming what is wrong."""
        if options:
            raise InvalidRequest(f"a {self.kind} export takes no options")
        return {}

    def describe(self, job) -> str:
        """What the job is about, in a few words, for lists."""
        return f"{job.start_date:%Y-%m-%d} – {job.end_date:%Y-%m-%d}"

    def run(self, job, progress: Progress) -> None:
        raise NotImplementedError
