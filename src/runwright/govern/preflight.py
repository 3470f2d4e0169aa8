"""Preflight: what a spec promises, checked against what it names, before anything starts.

A spec can be valid on its own and still fail at its first step: a model whose embedding has
fewer rows than the dataset's tokenizer has ids, a tokenizer or dataset hash that does not match,
a mixture naming a source the dataset does not have. Each of these used to end FAILED_PERMANENT
after the workers started, with the cause in a rank's log. `runwright spec validate` and
`runwright submit` run these checks first and refuse with the field and the fix.

Only a dataset on this machine's file system is read here. One at a URL is read by the workers
(through their node cache), which may hold credentials this command does not: it is reported as
not checked, never as passed.
"""

from pathlib import Path

from runwright.data.errors import DataError
from runwright.data.format.manifest import DatasetManifest, read_manifest
from runwright.errors import SpecError
from runwright.records import Record
from runwright.remote import MissingDriverError, require_driver
from runwright.spec import JobSpec


class Preflight(Record):
    """The outcome of the checks of one spec."""

    problems: tuple[str, ...] = ()
    """What would fail, each naming the spec field and the fix; empty when nothing would."""
    not_checked: tuple[str, ...] = ()
    """What could not be checked from here, and why."""

    @property
    def ok(self) -> bool:
        return not self.problems


def dataset_folder(spec: JobSpec, workdir: Path) -> Path | None:
    """The spec's dataset as a local folder (relative paths from the spec's folder, where the
    workers start), or None when it has none or names a URL."""
    where = spec.data.dataset
    if where is None or ("://" in where and not where.startswith("file://")):
        return None
    folder = Path(where.removeprefix("file://")).expanduser()
    return folder if folder.is_absolute() else workdir / folder


def check_spec(spec: JobSpec, workdir: Path) -> Preflight:
    """Every check of the spec against what it names (see the module doc): the drivers its URLs
    need, and the dataset."""
    drivers = tuple(driver_problems(spec))
    if drivers or spec.data.dataset is None:
        return Preflight(problems=drivers)
    folder = dataset_folder(spec, workdir)
    if folder is None:
        return Preflight(
            not_checked=(
                f"data.dataset {spec.data.dataset}: a URL is read by the workers, not at "
                "submit; its tokenizer, id and sources are checked when they open it",
            )
        )
    try:
        manifest = read_manifest(folder)
    except DataError as exc:
        return Preflight(problems=(f"data.dataset {spec.data.dataset}: {exc}",))
    return Preflight(problems=tuple(against_manifest(spec, manifest)))


def driver_problems(spec: JobSpec) -> list[str]:
    """A URL whose file-system driver is not installed here (e.g. `s3://` without s3fs): the
    controller and the workers would fail at their first read."""
    problems = []
    for field, location in (
        ("checkpoint.location", spec.checkpoint.location),
        ("data.dataset", spec.data.dataset),
    ):
        if location is None:
            continue
        try:
            require_driver(location)
        except MissingDriverError as exc:
            problems.append(f"{field}: {exc}")
    return problems


def against_manifest(spec: JobSpec, manifest: DatasetManifest) -> list[str]:
    """The spec's promises that `manifest` breaks (a pure function: tests feed it records)."""
    problems = []
    ids = manifest.tokenizer.vocab_size
    if spec.model.vocab_size < ids:
        problems.append(
            f"model.vocab_size={spec.model.vocab_size:,} is smaller than the dataset's tokenizer, "
            f"which has {ids:,} ids: set model.vocab_size: {ids} (or --set model.vocab_size={ids})"
        )
    expected_id = spec.data.manifest_id
    if expected_id is not None and manifest.dataset_id and expected_id != manifest.dataset_id:
        problems.append(
            f"data.manifest_id={expected_id[:16]}... but the dataset at {spec.data.dataset} is "
            f"{manifest.dataset_id[:16]}...: point data.dataset at the dataset you meant, or "
            "set data.manifest_id to its id (`runwright data inspect` prints it)"
        )
    expected_tokenizer = spec.tokenizer.hash
    if expected_tokenizer is not None and expected_tokenizer != manifest.tokenizer.sha256:
        problems.append(
            f"tokenizer.hash={expected_tokenizer[:16]}... but the dataset's tokenizer is "
            f"{manifest.tokenizer.sha256[:16]}...: the data was tokenized with another "
            "tokenizer; rebuild it with yours or drop tokenizer.hash"
        )
    have = manifest.sources()
    missing = [s.name for s in spec.data.mixture.sources if s.name not in have]
    if missing:
        problems.append(
            f"data.mixture.sources names {missing}, which the dataset does not have; its "
            f"training sources are {have}"
        )
    for stage in spec.data.mixture.stages:
        missing = [s.name for s in stage.sources if s.name not in have]
        if missing:
            problems.append(
                f"data.mixture.stages[{stage.name}].sources names {missing}, which the dataset "
                f"does not have; its training sources are {have}"
            )
    return problems


def require_preflight(spec: JobSpec, spec_file: Path) -> Preflight:
    """`check_spec` for the spec read from `spec_file`; SpecError listing the problems, if any."""
    preflight = check_spec(spec, spec_file.resolve().parent)
    if not preflight.ok:
        count = len(preflight.problems)
        raise SpecError(
            f"{spec_file}: the spec does not fit what it names ({count} problem"
            f"{'s' if count != 1 else ''})",
            list(preflight.problems),
        )
    return preflight
