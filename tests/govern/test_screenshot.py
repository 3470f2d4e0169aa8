"""report.html rendered by headless Chromium: the page loads from a file with no network and its
screenshot is the requested size and not blank.

Needs Debian's `chromium` package. Without it the test skips, unless RUNWRIGHT_REQUIRE_BROWSER=1
(set in CI), where a missing browser is a failure.
"""

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from runwright.govern import build_report

from .conftest import RUN_ID

WIDTH, HEIGHT = 1280, 2400


def find_chromium() -> str | None:
    if Path("/usr/bin/chromium").is_file():
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


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


@pytest.mark.integration
def test_report_screenshot_in_headless_chromium(store, tmp_path):
    browser = find_chromium()
    if browser is None:
        if os.environ.get("RUNWRIGHT_REQUIRE_BROWSER") == "1":
            pytest.fail("RUNWRIGHT_REQUIRE_BROWSER=1 but no chromium: apt-get install chromium")
        pytest.skip("no chromium on PATH or at /usr/bin/chromium (apt-get install chromium)")
    html = build_report(store, RUN_ID, tmp_path / "report").html_path
    png = tmp_path / "report.png"
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            f"--window-size={WIDTH},{HEIGHT}",
            html.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert png.is_file(), f"no screenshot (exit {done.returncode}): {done.stderr[-2000:]}"
    if os.environ.get("RUNWRIGHT_KEEP_SCREENSHOT"):
        shutil.copy(png, os.environ["RUNWRIGHT_KEEP_SCREENSHOT"])
    width, height, rows = decode_png(png.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    # Sample every 4th row and column: a blank page has one colour; the charts draw many
    # (blue, orange, green lines; red, green markers; grey text), and cover a real area.
    colours, inked = set(), 0
    for row in rows[::4]:
        for x in range(0, width * 3, 12):
            pixel = row[x : x + 3]
            colours.add(pixel)
            inked += pixel not in (b"\xff\xff\xff", b"\xf8\xf9\xfa")
    assert len(colours) > 50, f"only {len(colours)} distinct colours: the page looks blank"
    assert inked > 2000, f"only {inked} sampled pixels are not background"
