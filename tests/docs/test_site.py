"""The built documentation site opens in a real browser: headless Chromium screenshots have content.

Uses ``site/`` when ``make docs`` (or ``.ci/run``) built it, else builds the site into a temporary folder with
``mkdocs build --strict``. Skips with a message when the ``chromium`` binary (Debian package ``chromium``) or
MkDocs is missing.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [("index.html", "fednsl"), ("methods/logicp.html", "LogiCP")]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless browser check: no `chromium` binary on PATH (Debian: apt-get install chromium)")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = REPO / "site"
    if (built / "index.html").exists() and all((built / p).exists() for p, _ in PAGES):
        return built
    pytest.importorskip("mkdocs", reason="site/ is not built and mkdocs is not installed (extra `docs`)")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def _screenshot(browser: str, url: str, out: Path) -> np.ndarray:
    from PIL import Image

    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--screenshot={out}",
        "--window-size=1280,900",
        url,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.exists(), f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    with Image.open(out) as img:
        return np.asarray(img.convert("L"), dtype=np.float64)


@pytest.mark.parametrize(("page", "title"), PAGES)
def test_page_renders_with_content(site: Path, page: str, title: str, tmp_path: Path) -> None:
    path = site / page
    text = path.read_text(encoding="utf-8")
    m = re.search(r"<title>(.*?)</title>", text, flags=re.S)
    assert m and title in html.unescape(m.group(1)), f"{page}: title {m.group(1) if m else None!r} lacks {title!r}"
    pixels = _screenshot(_chromium(), path.as_uri(), tmp_path / "shot.png")
    assert pixels.shape == (900, 1280)
    # a blank or single-colour page has no variance; a rendered page has a header bar, text and navigation
    assert pixels.std() > 20, f"{page}: screenshot looks blank (pixel std {pixels.std():.1f})"
    background = np.median(pixels)
    assert (np.abs(pixels - background) > 40).mean() > 0.03, f"{page}: almost nothing differs from the background"
    dark_rows = (np.abs(pixels - background) > 40).any(axis=1).mean()
    assert dark_rows > 0.2, f"{page}: content on only {dark_rows:.0%} of the rows"
