"""Reporting: tables, figures and files from SimResult objects (see docs/metrics.md)."""

from coda.report.files import safe_name, to_jsonable, write_comparison, write_run
from coda.report.plots import plot_comparison_bars, plot_queue_delay_cdf, plot_utilisation
from coda.report.tables import comparison_table, markdown_comparison, summary_table

__all__ = [
    "comparison_table",
    "markdown_comparison",
    "plot_comparison_bars",
    "plot_queue_delay_cdf",
    "plot_utilisation",
    "safe_name",
    "summary_table",
    "to_jsonable",
    "write_comparison",
    "write_run",
]
