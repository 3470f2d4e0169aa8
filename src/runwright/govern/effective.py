"""The effective configuration of a run, and how it differs from an earlier run's (issue 17).

The effective configuration is what a run actually uses, as one flat mapping of dotted names:
every field of its spec (`training.optimizer.lr`), every value of its resolved plan
(`plan.micro_batch_size`) and the environment it starts in (`environment.python`,
`environment.torch`, `environment.runwright`). The controller's preflight writes it into the run's
PREFLIGHT_CHECKED event; `runwright preflight SPEC --against RUN` compares a spec with a run
before it is launched.

A difference breaks reproducibility unless the field is one that cannot change what is computed:
its name and governance, observability, budgets, recovery policy (and its data counterpart,
what happens to a shard that goes bad), checkpoint cadence and retention, and where and at which
priority it is scheduled (COSMETIC). Everything else (the
model, data, seeds, batch arithmetic, layout, precision, code, packages) can change the numbers,
so a run that differs there is not comparable bit for bit.
"""

import platform
from typing import Any

from runwright.events import EventType
from runwright.records import Record
from runwright.spec import JobSpec
from runwright.store import EventRecord, RunRecord

COSMETIC = (
    "name",
    "governance.",
    "observability.",
    "budget.",
    "recovery.",
    "data.on_corrupt_shard",
    "data.read_delay_seconds",
    "checkpoint.interval.",
    "checkpoint.keep_",
    "checkpoint.max_inflight",
    "checkpoint.when_full",
    "checkpoint.location",
    "checkpoint.on_save_failure",
    "checkpoint.verify_on_restore",
    "resources.pool",
    "resources.priority",
    "resources.preemptible",
    "resources.device_hour_price",
    "resources.peak_flops_per_device",
    "plan.checkpoint_every_steps",
)
"""Dotted names (or prefixes ending in `.`/`_`) whose change leaves the computation alone."""


class Difference(Record):
    field: str
    earlier: Any
    now: Any
    breaks_reproducibility: bool


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`; lists stay values."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, inner in value.items():
            flat.update(flatten(inner, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def effective_config(spec: JobSpec, versions: dict[str, str]) -> dict[str, Any]:
    """The effective configuration of a run of `spec` started in `versions`' environment."""
    plan = {f"plan.{name}": value for name, value in spec.plan.values().items()}
    environment = {f"environment.{name}": v for name, v in sorted(versions.items())}
    return {**flatten(spec.model_dump(mode="json")), **plan, **environment}


def this_environment() -> dict[str, str]:
    """The versions a run started from this process would have."""
    from runwright.govern.preflight_checks import package_version

    return {
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "runwright": package_version("runwright"),
    }


def recorded_config(run: RunRecord, events: list[EventRecord]) -> dict[str, Any]:
    """An earlier run's effective configuration: as its preflight recorded it, else rebuilt from
    its stored spec and plan and the versions its ranks reported (runs before preflight)."""
    for event in reversed(events):
        effective = event.attributes.get("effective")
        if event.type == EventType.PREFLIGHT_CHECKED and isinstance(effective, dict):
            return effective
    plan = {f"plan.{k}": (v or {}).get("value") for k, v in (run.plan or {}).items()}
    plan.pop("plan.notes", None)
    versions: dict[str, Any] = {}
    for event in events:
        if event.type == EventType.WORKER_STARTED:
            attrs = event.attributes
            versions = {
                "environment.python": attrs.get("python_version"),
                "environment.torch": attrs.get("torch_version"),
            }
            break
    return {**flatten(run.spec), **plan, **{k: v for k, v in versions.items() if v}}


def differences(earlier: dict[str, Any], now: dict[str, Any]) -> list[Difference]:
    """Every field whose value differs (or exists on one side only), reproducibility-breaking
    ones first."""
    found = [
        Difference(
            field=name,
            earlier=earlier.get(name),
            now=now.get(name),
            breaks_reproducibility=not name.startswith(COSMETIC),
        )
        for name in sorted(set(earlier) | set(now))
        if earlier.get(name) != now.get(name)
    ]
    return sorted(found, key=lambda d: (not d.breaks_reproducibility, d.field))
