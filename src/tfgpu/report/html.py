"""One self-contained HTML page: sections of text, tables and embedded PNG plots."""

from __future__ import annotations

import html
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgpu.files import write_text_atomic

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:980px;color:#222}
h1{font-size:1.6rem;margin-bottom:.2rem} h2{font-size:1.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
.meta{color:#666;font-size:.9rem} table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top} th{background:#f5f5f5}
.ok{color:#2a7d2a;font-weight:600} .warn{color:#b36b00;font-weight:600} .fail{color:#c62828;font-weight:600}
.verdict{font-size:1.1rem;padding:.6rem .8rem;background:#f6f8fa;border-left:4px solid #1f77b4;margin:.6rem 0}
img{max-width:100%;display:block;margin:.5rem 0}
"""


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)  # plain text (escaped)
    tables: list[tuple[list[str], list[list[Any]]]] = field(default_factory=list)  # (header, rows)
    images: list[str] = field(default_factory=list)  # base64 PNGs
    verdict: str | None = None
    element_id: str = ""


def _cell(value: Any) -> str:
    if isinstance(value, float):
        text = f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    else:
        text = "" if value is None else str(value)
    status = text if text in ("ok", "warn", "fail") else None
    return f'<span class="{status}">{html.escape(text)}</span>' if status else html.escape(text)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(title: str, sections: Sequence[Section], *, subtitle: str = "") -> str:
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<div class='meta'>{html.escape(subtitle or time.strftime('%Y-%m-%d %H:%M:%S'))}</div>",
    ]
    for section in sections:
        anchor = f" id='{html.escape(section.element_id)}'" if section.element_id else ""
        parts.append(f"<section{anchor}><h2>{html.escape(section.title)}</h2>")
        if section.verdict:
            parts.append(f"<div class='verdict'>{html.escape(section.verdict)}</div>")
        parts += [f"<p>{html.escape(p)}</p>" for p in section.paragraphs]
        parts += [_table(h, r) for h, r in section.tables]
        parts += [
            f"<img alt='{html.escape(section.title)} plot' src='data:image/png;base64,{img}'>"
            for img in section.images
        ]
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(path: str | os.PathLike, content: str) -> Path:
    """Write atomically: a temporary name, then rename."""
    return write_text_atomic(path, content)
