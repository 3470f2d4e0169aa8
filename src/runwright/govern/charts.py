"""The run charts' files: static/charts.js (drawn by both the dashboard's run page and
report.html) and plotly.js from the installed `plotly` package, found without importing plotly
(its import takes seconds and nothing here needs it), plus the safe embedding of both scripts and
of the charts' data in one HTML file.
"""

import json
import math
import re
from pathlib import Path
from typing import Any

from runwright.errors import NotFoundError

CHARTS_JS = Path(__file__).parent / "static" / "charts.js"
"""The run charts (govern/dashboard.py `chart_data` is what they draw)."""

# Inside a <script> element the HTML parser ends the script at `</script` and changes state at
# `<!--` (HTML Living Standard, 13.2.5, the script data states), whatever the JavaScript means.
# In a script such text can only sit in a string, a regular expression or a comment: in the first
# two `\x3C` reads as the same `<`, in a comment it changes nothing.
_SCRIPT_BREAKERS = re.compile(r"<(?=/script|!--)", re.IGNORECASE)


def plotly_js() -> Path:
    """plotly.min.js inside the installed `plotly` wheel (found without importing plotly)."""
    import importlib.util

    found = importlib.util.find_spec("plotly")
    if found is None or not found.submodule_search_locations:
        raise NotFoundError("plotly is not installed: pip install 'plotly>=5'")
    path = Path(next(iter(found.submodule_search_locations))) / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise NotFoundError(f"{path} is missing from the plotly package")
    return path


def inline_script(path: Path) -> str:
    """A script file as the body of an inline <script> element."""
    text = path.read_text(encoding="utf-8")
    return _SCRIPT_BREAKERS.sub(r"\\x3C", text)


def json_script(element_id: str, data: Any) -> str:
    """`data` as a <script type="application/json"> element that no value can end early: every
    `<`, `>` and `&` of the JSON text is written as a \\u escape (JSON.parse reads them back), so
    a run name such as `</script><script>...` stays a string. A non-finite number, which
    JSON.parse cannot read, is written as null."""
    text = json.dumps(_finite(data), separators=(",", ":"), allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
