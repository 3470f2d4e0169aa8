"""The data plane's compiled kernels (`csrc/`, module `_kernels`), or how to build them.

`pip install -e .` (and `make setup`) compiles them with the system's C compiler; a checkout
that was never installed has only the source.
"""

from runwright.data.errors import DataError

try:
    from runwright.data.read._kernels import ShardTable, fill_concat, fill_pad, permute_v1, quota_v1
except ImportError as exc:  # pragma: no cover - only without a build
    raise DataError(
        "runwright's compiled data kernels (src/runwright/data/read/csrc/) are not built; "
        "reinstall with `pip install -e .` or `make setup` (needs a C compiler such as gcc)"
    ) from exc

__all__ = ["ShardTable", "fill_concat", "fill_pad", "permute_v1", "quota_v1"]
