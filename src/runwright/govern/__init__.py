"""Governance: the run report (evidence chain, cost split, signal charts)."""

from runwright.govern.report import (
    FinalMetrics,
    ReportPaths,
    RunReport,
    build_report,
    collect_report,
)

__all__ = ["FinalMetrics", "ReportPaths", "RunReport", "build_report", "collect_report"]
