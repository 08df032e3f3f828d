"""MkDocs hook: the docstrings use Sphinx markup; show it as Sphinx would in the API pages.

- Roles (:class:`X`, :func:`f`) become plain code.
- A paragraph ending in the reST literal-block marker ``::`` before a code block ends in one colon, as in Sphinx
  (the indented block after it is already a code block in Markdown). Only the API pages (``api/``), which
  mkdocstrings renders from docstrings, are touched: the Markdown pages must not use ``::`` at all.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):(?=<code>)")
LITERAL_MARKER = re.compile(r"(?<=[^\s:]):(?=:</p>\s*(?:<div class=\"highlight\">|<pre>))")


def on_page_content(html: str, page: Any = None, **_: Any) -> str:
    """Drop the role prefix that mkdocstrings leaves before each rendered ``<code>`` span; in API pages, turn
    ``text::`` before a code block into ``text:``."""
    html = ROLE.sub("", html)
    src = getattr(getattr(page, "file", None), "src_uri", "") or ""
    if src.startswith("api/"):
        html = LITERAL_MARKER.sub("", html)
    return html
