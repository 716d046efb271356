"""Reporting: tables, figures and files from SimResult objects (see docs/metrics.md).

The figures (coda.report.plots and the *_plots modules) are imported where a plot is
drawn, not here: matplotlib takes most of a second to load and every command imports
this package."""

from coda.report.files import safe_name, to_jsonable, write_comparison, write_run
from coda.report.tables import comparison_table, markdown_comparison, summary_table

__all__ = [
    "comparison_table",
    "markdown_comparison",
    "safe_name",
    "summary_table",
    "to_jsonable",
    "write_comparison",
    "write_run",
]
