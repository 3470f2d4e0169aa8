"""Where the CLI finds its API token for a `runwright server`.

The token comes from $RUNWRIGHT_TOKEN, else from the credentials file
(`$XDG_CONFIG_HOME/runwright/credentials`, by default `~/.config/runwright/credentials`): JSON
`{"servers": {"<url>": {"token": "rwt_..."}}}`, which must be readable by its owner only (mode
0600), as ssh insists for its keys; `runwright token save` writes it so.
"""

import json
import os
import stat
from pathlib import Path
from typing import Any

from runwright.errors import RunwrightError

TOKEN_ENV = "RUNWRIGHT_TOKEN"


def credentials_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "runwright" / "credentials"


def normal_url(url: str) -> str:
    """A server URL as the credentials file keys it: no trailing slash."""
    return url.rstrip("/")


def read_token(server: str) -> str:
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token.strip()
    path = credentials_file()
    if not path.is_file():
        raise RunwrightError(
            f"no API token for {server}: set ${TOKEN_ENV}, or save one with "
            "`runwright --server URL token save TOKEN`"
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise RunwrightError(
            f"{path} is readable by others (mode {mode:o}); it holds API tokens: `chmod 600 {path}`"
        )
    try:
        saved = json.loads(path.read_text())["servers"][normal_url(server)]["token"]
    except (KeyError, TypeError, ValueError):
        raise RunwrightError(
            f"{path} holds no token for {server}: save one with "
            "`runwright --server URL token save TOKEN`"
        ) from None
    return str(saved)


def save_token(server: str, token: str) -> Path:
    """Write `token` for `server` into the credentials file, created with mode 0600."""
    path = credentials_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    data: dict[str, Any] = {"servers": {}}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
            data.setdefault("servers", {})
        except ValueError:
            raise RunwrightError(f"{path} is not JSON; move it away and save again") from None
    data["servers"][normal_url(server)] = {"token": token}
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out, indent=2)
    os.chmod(path.with_suffix(".tmp"), 0o600)
    os.replace(path.with_suffix(".tmp"), path)
    return path
