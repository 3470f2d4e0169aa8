"""A git revision's `src/`, unpacked beside this checkout, for benchmarks that compare with it.

`git archive REV src` into a folder, with this checkout's built C kernels copied in where the
revision has none (they are build outputs, not in git); put the returned folder first on
PYTHONPATH to run that revision's code with this checkout's environment."""

import shutil
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def baseline_src(rev: str, into: Path) -> Path:
    """`src/` of git revision `rev`, unpacked under `into` (the built C kernels copied in)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "src"], capture_output=True, check=True
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    tar = into / "src.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    for built in (REPO / "src").rglob("*.so"):
        target = into / built.relative_to(REPO)
        if target.parent.is_dir() and not target.exists():
            shutil.copy2(built, target)
    return into / "src"
