"""`runwright preflight SPEC`: named checks with a verdict, the evidence and the fix (issue 17).

Seed 000 asks that a run be checked before devices are spent on it. Each check here says what it
looked at and what to do when it fails; the controller runs the same checks when a run is
accepted (CREATED -> QUEUED), so a run that would fail at its first step or first save never
reaches the queue: it ends FAILED_PERMANENT with the failing check as its reason, and the
checks' verdicts are its PREFLIGHT_CHECKED event (warnings included).

  spec          the spec and its plan resolve (the plan's notes are warnings)
  data          the dataset exists and fits the spec (govern/preflight.py: tokenizer against
                model.vocab_size, manifest id, tokenizer hash, mixture sources; drivers for URLs)
  data.verify   a sample of the dataset's shards (first, last and evenly between) re-hashed
                against the manifest, and its tokenizer
  data.read     one shard read back, with the bandwidth measured
  memory        the memory ledger (`runwright plan memory --spec`) of one rank against the
                device memory the spec declares (with `plan memory`'s 10 % headroom), or, for
                CPU ranks, every rank of a node against this host's memory
  checkpoint.storage
                the checkpoint location is writable (a probe file written and fsynced, the
                bandwidth measured) and has room for what retention keeps: keep_last + 1
                checkpoints of the model states (parameters, gradients' master copies and
                optimizer states as the ledger counts them)
  checkpoint.resume
                with `checkpoint.resume_from`, the newest committed checkpoint there fits the
                run (govern/preflight_resume.py): exact, reshardable, or the mismatches
  trainer       with the reference trainer (`module:runwright.train`), the layout it builds:
                DDP, FSDP2, tensor parallel, FSDP2 x tp; pp > 1 fails (no pipeline stages)
  environment   the lock file the spec pins exists and hashes to its lock_hash; the versions of
                Python, torch and runwright here, as evidence

The collective check runs on the allocated nodes themselves, before the first step
(runtime/collectives.py), not here.
"""

import contextlib
import importlib.metadata
import os
import platform
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from runwright.data.format.dataset import file_sha256
from runwright.govern.preflight import check_spec, dataset_folder
from runwright.records import Record
from runwright.spec import JobSpec
from runwright.spec.parallel import parallel_layout

if TYPE_CHECKING:
    from runwright.store import Store

Verdict = Literal["pass", "warn", "fail"]
PROBE_BYTES = 2**20
"""Written (and fsynced) to the checkpoint location to measure it; small enough for every run."""
SAMPLED_SHARDS = 4
"""Shards `data.verify` re-hashes: the first, the last and evenly between."""


class Check(Record):
    """One named check's outcome."""

    name: str
    verdict: Verdict
    evidence: str
    """What was looked at and what was found, with figures."""
    fix: str = ""
    """What to change when it is not a pass."""


class PreflightReport(Record):
    """Every check of one spec, in order."""

    checks: tuple[Check, ...]
    effective: dict[str, Any] = Field(default_factory=dict)
    """The run's effective configuration (govern/effective.py): spec, plan and environment."""

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.verdict == "fail")

    @property
    def ok(self) -> bool:
        return not self.failed

    def reason(self) -> str:
        """The first failed check in words (a run's terminal detail)."""
        first = self.failed[0]
        return f"preflight check {first.name} failed: {first.evidence}; fix: {first.fix}"


def run_preflight(
    spec: JobSpec,
    workdir: Path,
    checkpoints: Path,
    root: Path | None = None,
    store: "Store | None" = None,
    project: str | None = None,
) -> PreflightReport:
    """Every check of `spec`, whose relative paths start at `workdir`; `checkpoints` is the
    local folder its run's checkpoints go to (or would: its nearest existing parent is probed);
    `root` is where a `checkpoint.resume_from` run id is looked up; `store` holds the datasets'
    use policies (without one, the build's tags are the policy) and `project` is the run's."""
    from runwright.govern.effective import effective_config, this_environment
    from runwright.govern.preflight_resume import check_resume

    checks = [_spec(spec), *_data(spec, workdir), _memory(spec)]
    checks += [_use_policy(store, spec, workdir, project, root or workdir)]
    checks += [_checkpoint_storage(spec, checkpoints)]
    resume = check_resume(spec, workdir, root)
    checks += [resume] if resume is not None else []
    checks += [_trainer(spec), _environment(spec, workdir)]
    return PreflightReport(
        checks=tuple(checks), effective=effective_config(spec, this_environment())
    )


def _spec(spec: JobSpec) -> Check:
    plan = spec.plan
    evidence = (
        f"world size {plan.world_size.value}, dp {plan.dp.value}, micro-batch "
        f"{plan.micro_batch_size.value}, {plan.total_steps.value} steps"
    )
    if plan.notes:
        return Check(
            name="spec", verdict="warn", evidence=f"{evidence}; {'; '.join(plan.notes)}",
            fix="see the notes; `runwright spec explain` shows how each value was derived",
        )  # fmt: skip
    return Check(name="spec", verdict="pass", evidence=evidence)


def _data(spec: JobSpec, workdir: Path) -> list[Check]:
    if spec.data.dataset is None:
        return [Check(name="data", verdict="pass", evidence="the spec names no dataset")]
    fits = check_spec(spec, workdir)
    if not fits.ok:
        return [
            Check(
                name="data",
                verdict="fail",
                evidence="; ".join(fits.problems),
                fix="each problem names the field to change",
            )
        ]
    folder = dataset_folder(spec, workdir)
    if folder is None:
        words = "; ".join(fits.not_checked)
        return [Check(name="data", verdict="warn", evidence=words, fix="none needed here")]
    found = Check(name="data", verdict="pass", evidence=f"{folder} fits the spec")
    return [found, *_sampled_verify(folder)]


def _use_policy(
    store: "Store | None", spec: JobSpec, workdir: Path, project: str | None, root: Path
) -> Check:
    """The use policies of the spec's datasets against its usage section (data/policy.py)."""
    from runwright.govern.data_contract import use_refusals

    if spec.data.dataset is None:
        return Check(name="data.policy", verdict="pass", evidence="the spec names no dataset")
    found = use_refusals(store, spec, workdir, project, root)
    if found:
        return Check(
            name="data.policy",
            verdict="fail",
            evidence="; ".join(r.message() for r in found),
            fix="declare a usage.purpose and usage.region the policy allows, or ask who can "
            "change the policy",
        )
    where = "the store's policy" if store is not None else "the build's tags (no store here)"
    return Check(name="data.policy", verdict="pass", evidence=f"allowed by {where}")


def _sampled_verify(folder: Path) -> list[Check]:
    from runwright.data.format.dataset import check_shard
    from runwright.data.format.manifest import read_manifest

    manifest = read_manifest(folder)
    shards = manifest.shards
    if not shards:
        return [
            Check(
                name="data.verify",
                verdict="fail",
                evidence="the manifest lists no shards",
                fix="rebuild the dataset (`runwright data build`)",
            )
        ]
    step = max(1, (len(shards) - 1) // max(1, SAMPLED_SHARDS - 1))
    picked = sorted({*range(0, len(shards), step), len(shards) - 1})[:SAMPLED_SHARDS]
    problems: list[str] = []
    read_bytes, began = 0, time.perf_counter()
    for index in picked:
        found, _ = check_shard(folder, shards[index], "digest")
        problems += found
        read_bytes += shards[index].bin_bytes + shards[index].idx_bytes
    seconds = max(time.perf_counter() - began, 1e-9)
    tokenizer = folder / manifest.tokenizer.file
    try:
        if file_sha256(tokenizer) != manifest.tokenizer.sha256:
            problems.append(f"{manifest.tokenizer.file}: sha256 differs from the manifest")
    except OSError as exc:
        problems.append(f"{manifest.tokenizer.file}: cannot be read ({exc.strerror or exc})")
    sample = f"{len(picked)} of {len(shards)} shards"
    if problems:
        return [
            Check(
                name="data.verify",
                verdict="fail",
                evidence=f"{sample}: {'; '.join(problems)}",
                fix=f"`runwright data verify {folder}` checks every shard; rebuild or restore "
                "the dataset from its source",
            )
        ]
    rate = read_bytes / seconds / 1e6
    return [
        Check(name="data.verify", verdict="pass", evidence=f"{sample} and the tokenizer match"),
        Check(
            name="data.read",
            verdict="pass",
            evidence=f"read {read_bytes / 1e6:,.1f} MB of shards at {rate:,.0f} MB/s",
        ),
    ]


def _memory(spec: JobSpec) -> Check:
    from runwright.plan.spec_ledger import HEADROOM_FRACTION, spec_memory_ledger

    res = spec.resources
    ledger = spec_memory_ledger(spec)
    if ledger is None:
        return Check(name="memory", verdict="pass", evidence="the spec declares no model")
    need = ledger.total_bytes
    if res.device_type == "cpu":
        ranks = res.devices_per_node
        host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        usable = host * (1 - HEADROOM_FRACTION)
        evidence = (
            f"{ranks} CPU rank(s) x {_gib(need)} (memory ledger) = {_gib(ranks * need)} of "
            f"{_gib(usable)} usable host memory here"
        )
        if ranks * need > usable:
            return Check(
                name="memory",
                verdict="fail",
                evidence=evidence,
                fix="lower resources.devices_per_node or the model, or raise the data-parallel "
                "degree across more nodes",
            )
        return Check(name="memory", verdict="pass", evidence=evidence)
    capacity = res.device_memory_bytes
    if capacity is None:
        return Check(
            name="memory", verdict="warn",
            evidence=f"{_gib(need)} per device (memory ledger); the spec declares no device memory",
            fix="set resources.device_memory_bytes so the ledger can be checked",
        )  # fmt: skip
    usable = capacity * (1 - HEADROOM_FRACTION)
    evidence = f"{_gib(need)} per device of {_gib(usable)} usable ({_gib(capacity)} less 10 %)"
    if need > usable:
        return Check(
            name="memory", verdict="fail", evidence=evidence,
            fix="lower plan.micro_batch_size or data.sequence_length, raise parallelism.tp/pp, "
            "or use devices with more memory (`runwright plan memory --spec` shows the rows)",
        )  # fmt: skip
    return Check(name="memory", verdict="pass", evidence=evidence)


def _checkpoint_storage(spec: JobSpec, folder: Path) -> Check:
    ckpt = spec.checkpoint
    if not ckpt.enabled:
        return Check(name="checkpoint.storage", verdict="pass", evidence="checkpoints are off")
    location = ckpt.location
    if location is not None and "://" in location and not location.startswith("file://"):
        return Check(
            name="checkpoint.storage", verdict="warn",
            evidence=f"checkpoint.location {location} is not probed from here",
            fix="none needed: the first save reports a store it cannot write",
        )  # fmt: skip
    probe_in = folder
    while not probe_in.exists() and probe_in != probe_in.parent:
        probe_in = probe_in.parent
    from runwright.plan.spec_ledger import checkpoint_bytes

    one = checkpoint_bytes(spec)
    needed = (ckpt.keep_last + 1) * one
    probe = probe_in / f".runwright-preflight-{os.getpid()}"
    try:
        began = time.perf_counter()
        with open(probe, "wb") as out:
            out.write(os.urandom(PROBE_BYTES))
            out.flush()
            os.fsync(out.fileno())
        seconds = max(time.perf_counter() - began, 1e-9)
        free = shutil.disk_usage(probe_in).free
    except OSError as exc:
        return Check(
            name="checkpoint.storage", verdict="fail",
            evidence=f"cannot write to {probe_in}: {exc.strerror or exc}",
            fix="make the folder writable, or set checkpoint.location to one that is",
        )  # fmt: skip
    finally:
        with contextlib.suppress(OSError):  # not there, or its folder is not one
            probe.unlink(missing_ok=True)
    evidence = (
        f"{probe_in} writable at {PROBE_BYTES / seconds / 1e6:,.0f} MB/s (fsynced probe); "
        f"{_gib(free)} free, retention keeps up to {ckpt.keep_last + 1} checkpoints of about "
        f"{_gib(one)} = {_gib(needed)}"
    )
    if needed > free:
        return Check(
            name="checkpoint.storage", verdict="fail", evidence=evidence,
            fix="free space, lower checkpoint.keep_last, or set checkpoint.location elsewhere",
        )  # fmt: skip
    if 2 * needed > free:
        return Check(
            name="checkpoint.storage", verdict="warn", evidence=evidence,
            fix="less than twice the room retention needs: other runs share this volume",
        )  # fmt: skip
    return Check(name="checkpoint.storage", verdict="pass", evidence=evidence)


REFERENCE_TRAINER = "module:runwright.train"


def _trainer(spec: JobSpec) -> Check:
    """The layout the reference trainer builds (train/layouts.py); another program's layouts are
    its own to check."""
    if spec.code.entrypoint != REFERENCE_TRAINER:
        return Check(name="trainer", verdict="pass", evidence="not the reference trainer")
    layout = parallel_layout(spec)
    evidence = ", ".join(f"{k} {v}" for k, v in layout.items())
    if spec.parallelism.pp > 1:
        return Check(
            name="trainer", verdict="fail",
            evidence=f"{evidence}: the reference trainer builds no pipeline stages",
            fix="set parallelism.pp: 1 (use tp or dp_mode: fsdp2 to split the model instead)",
        )  # fmt: skip
    return Check(name="trainer", verdict="pass", evidence=f"{evidence}, {spec.training.precision}")


def _environment(spec: JobSpec, workdir: Path) -> Check:
    versions = (
        f"Python {platform.python_version()}, torch {package_version('torch')}, "
        f"runwright {package_version('runwright')}"
    )
    env = spec.environment
    if env.lock_file is None:
        return Check(
            name="environment", verdict="warn", evidence=f"{versions}; no lock file pinned",
            fix="set environment.lock_file (and lock_hash) to pin the packages a run uses",
        )  # fmt: skip
    path = Path(env.lock_file).expanduser()
    path = path if path.is_absolute() else workdir / path
    try:
        digest = file_sha256(path)
    except OSError as exc:
        return Check(
            name="environment", verdict="fail",
            evidence=f"environment.lock_file {path}: cannot be read ({exc.strerror or exc})",
            fix="point environment.lock_file at the lock file, relative to the spec's folder",
        )  # fmt: skip
    if env.lock_hash is not None and env.lock_hash != digest:
        return Check(
            name="environment", verdict="fail",
            evidence=f"{path} hashes to {digest[:16]}..., the spec pins {env.lock_hash[:16]}...",
            fix="install from the pinned lock file, or set environment.lock_hash to the new "
            "hash if the change is meant",
        )  # fmt: skip
    return Check(name="environment", verdict="pass", evidence=f"{versions}; {path} matches")


def package_version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _gib(value: float) -> str:
    return f"{value / 2**30:,.2f} GiB"
