"""Headless Chromium for the browser tests (report.html, the dashboard): Debian's `chromium`
package, driven by Playwright (the dev extra; never `playwright install`), and a check that a
screenshot is not blank. Without either the tests skip, unless RUNWRIGHT_REQUIRE_BROWSER=1 (set
in CI), where that is a failure. Loaded by tests/conftest.py as `runwright_tests_browser` (the
tests are not a package)."""

import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update"]  # fmt: skip


def find_chromium() -> str | None:
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


def playwright_chromium() -> tuple[str, Any]:
    """(the chromium binary, playwright's `sync_playwright`), or a skip (a failure under
    RUNWRIGHT_REQUIRE_BROWSER=1) naming what is missing."""
    chromium = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if chromium is None or sync_playwright is None:
        missing = "chromium" if chromium is None else "playwright (the dev extra)"
        if os.environ.get("RUNWRIGHT_REQUIRE_BROWSER") == "1":
            pytest.fail(f"RUNWRIGHT_REQUIRE_BROWSER=1 but no {missing}")
        pytest.skip(f"no {missing} (apt-get install chromium; pip install -e '.[dev]')")
    return chromium, sync_playwright


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the unfiltered pixel rows of an 8-bit RGB or RGBA PNG (the only kinds
    Chromium's screenshots use), per the PNG specification (W3C, 2003), sections 9 and 11."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
    assert header is not None, "PNG without IHDR"
    width, height, depth, colour_type = header[:4]
    assert depth == 8 and colour_type in (2, 6), f"unexpected PNG format {depth}/{colour_type}"
    bpp = 3 if colour_type == 2 else 4
    raw, stride, rows = zlib.decompress(idat), width * bpp, []
    previous = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line) if bpp == 3 else bytes(v for j, v in enumerate(line) if j % 4 < 3))
        previous = line
    return width, height, rows


def assert_not_blank(png: Path) -> tuple[int, int]:
    """Sample every 4th row and column: a blank page has one colour; charts draw many (lines,
    markers, text) and cover a real area. Returns the screenshot's width and height."""
    width, height, rows = decode_png(png.read_bytes())
    colours, inked = set(), 0
    for row in rows[::4]:
        for x in range(0, width * 3, 12):
            pixel = row[x : x + 3]
            colours.add(pixel)
            inked += pixel not in (b"\xff\xff\xff", b"\xf8\xf9\xfa")
    assert len(colours) > 50, f"{png.name}: only {len(colours)} colours, the page looks blank"
    assert inked > 2000, f"{png.name}: only {inked} sampled pixels are not background"
    return width, height
