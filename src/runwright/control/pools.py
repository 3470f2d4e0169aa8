"""Resource pools: which executor runs a spec's `resources.pool`, and with which site settings.

A spec names a pool (`resources.pool`, `default` unless it says otherwise); the deployment's pools
file says what that pool is: the local executor on this machine, or a Slurm partition with its
account, QoS, GRES name, time limit and signal lead. The file is found as `--pools FILE`, else
`$RUNWRIGHT_POOLS`, else `<root>/pools.yaml`; without one there is a single pool, `default`, on
the local executor.

```yaml
pools:
  default: {executor: local}
  debug:
    executor: slurm
    partition: debug
    account: ml            # --account
    qos: normal            # --qos
    gres: gpu              # devices become --gres=gpu:<devices_per_node>
    time_limit_minutes: 240
    signal_lead_seconds: 120
    extra_sbatch_args: ["--constraint=ib"]
```

Partition, account and QoS live in the pool, not the spec: the spec is the experiment (its hash
is its identity, and the same spec runs on a laptop and a cluster), while partitions and accounts
are the site's. A spec picks them by naming a pool; a site offers one pool per partition or
account it wants runs to reach. So moving a run to another partition changes no spec hash.

A run records the pool it was placed through, settings included, in its allocation
(`pool_of_record`), so a controller started later with another pools file (or none) still drives
a Slurm run through Slurm, with the settings it was submitted under.
"""

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator

from runwright.control.executors.protocol import Executor
from runwright.errors import PlacementError, RunwrightError
from runwright.records import Record
from runwright.spec import JobSpec

POOLS_ENV = "RUNWRIGHT_POOLS"
POOLS_FILE_NAME = "pools.yaml"
DEFAULT_POOL = "default"
MAX_POOLS_FILE_BYTES = 1_000_000
"""A pools file is a few lines per pool; a larger one is a mistake (a wrong path)."""


class PoolsError(RunwrightError):
    """The pools file is missing, malformed, or lacks the pool a spec names."""


class Pool(Record):
    """One pool: the executor that places its runs and that executor's settings."""

    executor: Literal["local", "slurm"] = "local"
    """`local` (torchrun on this machine) or `slurm` (one Slurm job per allocation)."""
    partition: str | None = None
    """Slurm partition (`--partition`); None = the cluster's default partition."""
    account: str | None = None
    """Slurm account charged (`--account`)."""
    qos: str | None = None
    """Slurm quality of service (`--qos`)."""
    gres: str | None = None
    """The GRES name of the partition's accelerators (`gpu`): a cuda spec asks for
    `--gres=<gres>:<devices_per_node>`. Without it, a cuda spec is refused on this pool."""
    time_limit_minutes: int | None = Field(default=None, gt=0, le=525_600)
    """`--time` in minutes; None = the partition's default. Ranks get SIGTERM
    `signal_lead_seconds` before it and save at a step boundary."""
    signal_lead_seconds: int = Field(default=120, ge=0, le=65_535)
    """`--signal=TERM@<seconds>`: how long before the time limit the ranks are told to stop
    (long enough for a step and a checkpoint save)."""
    extra_sbatch_args: tuple[str, ...] = ()
    """More `sbatch` options, verbatim (`--constraint=ib`, `--reservation=r1`)."""
    python: str | None = None
    """The Python interpreter on the nodes (default: the controller's own, which must then
    exist at the same path on every node)."""

    @model_validator(mode="after")
    def _slurm_only(self) -> "Pool":
        if self.executor == "local":
            set_ = [
                name
                for name in ("partition", "account", "qos", "gres", "time_limit_minutes")
                if getattr(self, name) is not None
            ]
            if set_ or self.extra_sbatch_args:
                raise ValueError(
                    f"{', '.join(set_ or ['extra_sbatch_args'])} apply to executor: slurm only; "
                    "remove them or set executor: slurm"
                )
        return self


class PoolsFile(Record):
    """The pools file: pool name -> pool."""

    pools: dict[str, Pool]
    """Every pool a spec may name in resources.pool."""


BUILT_IN = PoolsFile(pools={DEFAULT_POOL: Pool()})
"""What applies without a pools file: one pool, `default`, on the local executor."""


def pools_path(root: Path, given: Path | str | None = None) -> Path | None:
    """`given`, else $RUNWRIGHT_POOLS, else `<root>/pools.yaml` when it exists, else None."""
    chosen = given or os.environ.get(POOLS_ENV)
    if chosen:
        return Path(chosen).expanduser().resolve()
    candidate = root / POOLS_FILE_NAME
    return candidate if candidate.is_file() else None


def load_pools(path: Path | None) -> PoolsFile:
    """The pools of `path` (BUILT_IN for None); PoolsError naming the file and the field."""
    if path is None:
        return BUILT_IN
    try:
        if path.stat().st_size > MAX_POOLS_FILE_BYTES:
            raise PoolsError(f"pools file {path} is over {MAX_POOLS_FILE_BYTES:,} bytes")
        raw: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PoolsError(
            f"cannot read pools file {path}: {exc.strerror or exc}; fix --pools or "
            f"${POOLS_ENV}, or remove it to use the one local pool `default`"
        ) from None
    except yaml.YAMLError as exc:
        raise PoolsError(f"pools file {path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("pools"), dict):
        raise PoolsError(f"pools file {path} must be a mapping with `pools: {{NAME: {{...}}}}`")
    try:
        return PoolsFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise PoolsError(f"pools file {path}: {problems}") from None


def pool_named(pools: PoolsFile, name: str, source: Path | None = None) -> Pool:
    """The pool a spec's resources.pool names; PoolsError listing the pools there are."""
    pool = pools.pools.get(name)
    if pool is None:
        where = f"pools file {source}" if source else "the built-in pools (no pools file)"
        raise PoolsError(
            f"resources.pool={name!r} is not in {where}; pools there: "
            f"{', '.join(sorted(pools.pools))}. Set resources.pool to one of them, or add "
            f"{name!r} to the pools file (--pools, ${POOLS_ENV} or <root>/{POOLS_FILE_NAME})"
        )
    return pool


def make_executor(name: str, pool: Pool) -> Executor:
    """The executor of pool `name`."""
    if pool.executor == "slurm":
        from runwright.control.executors.slurm import SlurmExecutor

        return SlurmExecutor(name, pool)
    from runwright.control.executors.local import LocalExecutor

    return LocalExecutor()


def pool_record(name: str, pool: Pool) -> dict[str, Any]:
    """What a run's allocation keeps of its pool, so later controllers use the same settings."""
    return {"pool": name, "pool_settings": pool.model_dump(mode="json")}


def pool_of_record(allocation: dict[str, Any] | None) -> tuple[str, Pool] | None:
    """The pool a run's allocation recorded (`pool_record`), if any."""
    if not allocation or "pool_settings" not in allocation:
        return None
    return str(allocation.get("pool", DEFAULT_POOL)), Pool.model_validate(
        allocation["pool_settings"]
    )


class PoolExecutors:
    """Which executor drives each run: `fixed` when given (tests), else the pool the run's
    allocation recorded, else its spec's pool in the pools file. One executor per pool and
    settings, kept (an executor may cache what its engine said: the Slurm one, job states)."""

    def __init__(
        self,
        root: Path,
        pools_file: Path | None = None,
        fixed: Executor | None = None,
        guard: Callable[[Executor], Executor] | None = None,
    ) -> None:
        self.source = pools_path(root, pools_file)
        """The pools file in use (None: the built-in pools)."""
        self.pools = load_pools(self.source)
        self._guard = guard or (lambda executor: executor)
        """Wraps every executor handed out (the controller's lease guard, leasing.py)."""
        self.fixed = self._guard(fixed) if fixed is not None else None
        self._made: dict[str, Executor] = {}
        self.default = fixed or self.of_pool(
            DEFAULT_POOL, self.pools.pools.get(DEFAULT_POOL, Pool())
        )
        """The `default` pool's executor."""

    def of_pool(self, name: str, pool: Pool) -> Executor:
        key = f"{name}:{pool.model_dump_json()}"
        if key not in self._made:
            self._made[key] = self._guard(make_executor(name, pool))
        return self._made[key]

    def for_spec(self, spec: JobSpec) -> Executor:
        """The executor a new run of `spec` would get; PoolsError for a pool not in the file."""
        name = spec.resources.pool
        return self.fixed or self.of_pool(name, pool_named(self.pools, name, self.source))

    def record(self, allocation: dict[str, Any] | None, spec: JobSpec) -> dict[str, Any]:
        """What the run's allocation keeps of its pool (`pool_record`): the one it recorded,
        else its spec's from the file (PoolsError when the file lacks it)."""
        recorded = pool_of_record(allocation)
        if recorded is not None:
            return pool_record(*recorded)
        name = spec.resources.pool
        return pool_record(name, pool_named(self.pools, name, self.source))

    def of_run(self, allocation: dict[str, Any] | None, spec: JobSpec) -> Executor:
        """The executor that drives a run with this allocation record and spec. A pool missing
        from the file falls back to the default executor: the allocation step fails such a run
        (`record` raises), and winding it down finds nothing anywhere else."""
        if self.fixed is not None:
            return self.fixed
        recorded = pool_of_record(allocation)
        if recorded is not None:
            return self.of_pool(*recorded)
        name = spec.resources.pool
        pool = self.pools.pools.get(name)
        return self.default if pool is None else self.of_pool(name, pool)


def check_placement(spec: JobSpec, pools_file: Path) -> None:
    """PlacementError with the reason when the pool `spec` names can never place it."""
    pools = load_pools(pools_file)
    pool = pool_named(pools, spec.resources.pool, pools_file)
    refusal = make_executor(spec.resources.pool, pool).refusal(spec)
    if refusal is not None:
        raise PlacementError(refusal)
