"""The report: ``ReportData`` built once from analysis results (``data``), rendered in the
terminal (``terminal``), as one self-contained HTML file (``html``, plots from ``svg``) or
as JSON (``ReportData.to_dict``)."""

from traceatlas.report.data import ReportData, build

__all__ = ["ReportData", "build"]
