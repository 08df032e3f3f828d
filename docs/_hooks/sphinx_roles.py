"""MkDocs hook: the docstrings use Sphinx roles (:class:`X`, :func:`f`); show them as plain code in the API pages."""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):(?=<code>)")


def on_page_content(html: str, **_: Any) -> str:
    """Drop the role prefix that mkdocstrings leaves before each rendered ``<code>`` span."""
    return ROLE.sub("", html)
