"""Self-contained HTML reports with embedded plots (matplotlib, PNG as base64)."""

from tfgpu.report.html import Section, render, write

__all__ = ["Section", "render", "write"]
