"""The `checkpoint.resume` preflight check: does the checkpoint `checkpoint.resume_from` names fit
the run that would start from it?

It finds that root's newest committed checkpoint and asks the restore's own question
(ckpt/compat.py `decide`) with what the spec says the run will be: its world size and layout,
its dataset's id and tokenizer hash, and, for the reference trainer, its model's parameter names,
shapes and dtypes (built on the meta device: no memory, no weights). Exact when they match,
reshardable when only the world size or layout differ, a failure naming every mismatch of
tokenizer, dataset or model otherwise; and a failure when the checkpoint is already at or past
`training.steps`, so nothing would be trained. The workers load the newest committed checkpoint
that verifies when they start, which is this one unless the other run saves again meanwhile.
"""

from pathlib import Path

from runwright.errors import RunwrightError
from runwright.govern.preflight_checks import Check
from runwright.spec import JobSpec
from runwright.spec.parallel import parallel_layout

NAME = "checkpoint.resume"
REFERENCE_TRAINER = "module:runwright.train"


def check_resume(spec: JobSpec, workdir: Path, root: Path | None) -> Check | None:
    """The check, or None when the spec resumes from nothing."""
    given = spec.checkpoint.resume_from
    if given is None:
        return None
    from runwright.ckpt import inventory as inv
    from runwright.ckpt.compat import CurrentRun, decide
    from runwright.ckpt.errors import IncompatibleCheckpointError

    try:
        folder = inv.resume_root(given, root, workdir)
        _, found = inv.find(folder, "latest")
    except RunwrightError as exc:
        return Check(
            name=NAME,
            verdict="fail",
            evidence=f"checkpoint.resume_from {given!r}: {exc}",
            fix="name a run of this root that committed a checkpoint (`runwright ckpt list "
            "RUN`), or a checkpoint folder or URL",
        )
    manifest = found.manifest
    plan = spec.plan
    unchecked: list[str] = []
    dataset_id, tokenizer_hash = _dataset_identity(spec, workdir, unchecked)
    current = CurrentRun(
        world_size=int(plan.world_size.value),
        parallel_layout=parallel_layout(spec),
        tokenizer_hash=tokenizer_hash,
        data_manifest_id=dataset_id,
        model_schema=_model_schema(spec, unchecked),
    )
    where = f"checkpoint {manifest.checkpoint_id[:16]} (step {manifest.step}) at {folder}"
    try:
        mode = decide(manifest, current)
    except IncompatibleCheckpointError as exc:
        return Check(
            name=NAME,
            verdict="fail",
            evidence=str(exc),
            fix="resume from a checkpoint of the same tokenizer, dataset and model, or start "
            "fresh from an export (`runwright ckpt export`)",
        )
    steps = int(plan.total_steps.value)
    if manifest.step >= steps:
        return Check(
            name=NAME,
            verdict="fail",
            evidence=f"{where} is at or past training.steps={steps}: nothing would be trained",
            fix=f"raise training.steps above {manifest.step}",
        )
    how = (
        "exact (same world size and layout)"
        if mode.value == "exact"
        else f"resharded: world size {manifest.world_size} -> {current.world_size}, layout "
        f"{manifest.parallel_layout} -> {current.parallel_layout}"
    )
    evidence = f"{where}: {how}; trains steps {manifest.step + 1}-{steps}"
    if unchecked:
        return Check(
            name=NAME,
            verdict="warn",
            evidence=f"{evidence}; not checked: {'; '.join(unchecked)}",
            fix="the workers' restore checks what preflight could not",
        )
    return Check(name=NAME, verdict="pass", evidence=evidence)


def _dataset_identity(
    spec: JobSpec, workdir: Path, unchecked: list[str]
) -> tuple[str | None, str | None]:
    """(dataset id, tokenizer sha256) the run will train with, as the trainer reports them."""
    from runwright.govern.preflight import dataset_folder

    if spec.data.dataset is None:
        unchecked.append("the dataset (the spec names none)")
        return spec.data.manifest_id, spec.tokenizer.hash
    folder = dataset_folder(spec, workdir)
    if folder is None:
        unchecked.append("the dataset (not readable here)")
        return spec.data.manifest_id, spec.tokenizer.hash
    from runwright.data.format.manifest import read_manifest

    manifest = read_manifest(folder)
    return manifest.dataset_id, manifest.tokenizer.sha256


def _model_schema(spec: JobSpec, unchecked: list[str]) -> dict[str, tuple[list[int], str]]:
    """The reference trainer's parameter names, shapes and dtypes, built on the meta device."""
    if spec.code.entrypoint != REFERENCE_TRAINER:
        unchecked.append("the model's shapes (a script of one's own builds its model)")
        return {}
    import torch

    from runwright.train.model import GPT

    with torch.device("meta"):
        model = GPT(spec.model, spec.data.sequence_length)
    return {name: (list(t.shape), str(t.dtype)) for name, t in model.state_dict().items()}
