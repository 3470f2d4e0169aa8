"""runwright: turn a PyTorch training program into a run that can be started, observed, recovered
and audited.

`runwright.init()` inside a training process returns its run context (see runwright.runtime), and
`runwright.StopRun` is what its `step_healthy` raises where the run stops; both are imported
lazily so that `import runwright` stays cheap for the CLI and the spec tools.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "init":
        from runwright.runtime import init

        return init
    if name == "StopRun":
        from runwright.runtime.stop import StopRun

        return StopRun
    raise AttributeError(f"module 'runwright' has no attribute {name!r}")
