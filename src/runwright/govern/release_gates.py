"""Release gates (issue 17): what an exported model must show before a person may approve it.

Each gate has a name, a verdict, the evidence and the fix, like a preflight check:

- `export.files`: release.json names the requested checkpoint, and lists every file of the
  export with the size and sha256 it has now (none missing, none unlisted).
- `export.load`: a fresh, offline process loads the export from its folder alone, as its user
  would (transformers for hf-gpt2, runwright's reference GPT for the runwright layout).
- `tokenizer`: the export's tokenizer file is the dataset's (sha256), and the loaded tokenizer
  gives the dataset tokenizer's ids on fixed texts.
- `outputs`: the exported model's logits on fixed probe rows equal the training model's (the
  checkpoint's weights in `runwright.train.model.GPT`): bitwise for the runwright layout, within
  `output_tolerance` for hf-gpt2 (another implementation).
- `eval`: the exported model's loss on the dataset's eval rows is within `eval_tolerance`
  (relative) of the loss the run recorded for that checkpoint (EVALUATED).
- `resources`: load time and the load's peak memory, measured in the child; fails only past a
  limit given.
- `approval`: a person with the role to approve decided (store/releases.py); pending until then.

The probe rows are the first rows of the eval set (else rows drawn from a fixed seed); their
sha256 is in the evidence, so the same figures can be recomputed.
"""

import hashlib
import json
import math
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from runwright.ckpt.export import RELEASE_FILE, ReleaseManifest
from runwright.ckpt.export_source import file_sha256
from runwright.govern import release_probe as probe
from runwright.records import Record
from runwright.spec import JobSpec

Verdict = Literal["pass", "fail", "pending"]

PROBE_ROWS = 4
PROBE_SEED = 20261202
PROBE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def main(argv):\n    return 0\n",
    "Ünïcödé, emoji 🙂 and    runs of spaces\tand tabs.",
    "",
]
"""Texts whose ids the export's tokenizer must reproduce (the empty one included)."""
PROBE_TIMEOUT_SECONDS = 600.0


class Gate(Record):
    """One gate's outcome."""

    name: str
    verdict: Verdict
    evidence: str
    fix: str = ""
    figures: dict[str, Any] = Field(default_factory=dict)
    """The measurements behind the verdict (seconds, bytes, differences)."""


class GateLimits(Record):
    """What the gates hold an export to."""

    output_tolerance: float = Field(default=1e-4, ge=0, allow_inf_nan=False)
    """Largest |logit difference| allowed for an export another implementation loads (hf-gpt2);
    the runwright layout loads into the training model's own class and must be bitwise equal."""
    eval_tolerance: float = Field(default=1e-3, ge=0, allow_inf_nan=False)
    """Largest relative difference of the eval loss from the run's own evaluation."""
    max_load_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_load_memory_bytes: int | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class TrainingSide:
    """What the gates compare the export with: the training model and the run's records."""

    checkpoint_id: str
    spec: JobSpec
    weights: dict[str, torch.Tensor]
    """The checkpoint's model tensors (runwright's names), read with DCP."""
    dataset: str | None
    """The dataset folder the run trained on (its tokenizer and eval split)."""
    tokenizer_file: str | None
    tokenizer_sha256: str | None
    train_eval_loss: float | None
    """The loss the run recorded for this checkpoint on the eval split (EVALUATED)."""


def check_files(export: Path, checkpoint_id: str | None = None) -> Gate:
    """`export.files`: release.json against the files there now."""
    fix = "export the checkpoint again (a new release request); never edit an export by hand"
    try:
        release = ReleaseManifest.model_validate_json((export / RELEASE_FILE).read_bytes())
    except (OSError, ValueError) as exc:
        return Gate(
            name="export.files",
            verdict="fail",
            evidence=f"{RELEASE_FILE} cannot be read: {exc}",
            fix=fix,
        )
    problems: list[str] = []
    if not release.files:
        problems.append("release.json lists no files: there is nothing to check")
    if checkpoint_id is not None and release.source_checkpoint_id != checkpoint_id:
        problems.append(
            f"release.json names checkpoint {release.source_checkpoint_id}, not {checkpoint_id}"
        )
    listed = {f.name: f for f in release.files}
    present = {
        str(p.relative_to(export))
        for p in export.rglob("*")
        if p.is_file() and p.name != RELEASE_FILE
    }
    problems += [f"{name} is missing" for name in sorted(set(listed) - present)]
    problems += [f"{name} is not listed in release.json" for name in sorted(present - set(listed))]
    for name in sorted(set(listed) & present):
        path, want = export / name, listed[name]
        size = path.stat().st_size
        if size != want.size_bytes:
            problems.append(f"{name} has {size:,} bytes, release.json says {want.size_bytes:,}")
        elif file_sha256(path) != want.sha256:
            problems.append(f"{name}'s sha256 differs from release.json's")
    if problems:
        return Gate(name="export.files", verdict="fail", evidence="; ".join(problems), fix=fix)
    total = sum(f.size_bytes for f in release.files)
    return Gate(
        name="export.files",
        verdict="pass",
        evidence=f"{len(listed)} files, {total:,} bytes, each matches release.json's sha256",
        figures={"files": len(listed), "bytes": total},
    )


def probe_rows(side: TrainingSide) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(probe rows [n, sequence_length], eval rows [m, sequence_length + 1] or None)."""
    length = side.spec.data.sequence_length
    rows = None
    if side.dataset is not None:
        from runwright.train.evaluate import eval_rows

        rows = eval_rows(side.dataset, length, side.spec.training.eval_sequences, 0, 1)
    if rows is not None:
        return rows[:PROBE_ROWS, :-1].contiguous(), rows
    generator = torch.Generator().manual_seed(PROBE_SEED)
    vocab = side.spec.model.vocab_size
    return torch.randint(0, vocab, (PROBE_ROWS, length), generator=generator), None


def training_logits(side: TrainingSide, tokens: torch.Tensor) -> torch.Tensor:
    """The training model's logits: the checkpoint's weights in the reference trainer's GPT."""
    from runwright.train.model import GPT

    model = GPT(side.spec.model, side.spec.data.sequence_length)
    model.load_state_dict(side.weights, strict=True)
    model.eval()
    with torch.no_grad():
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        return model(tokens, positions, torch.zeros_like(tokens)).float()


def run_probe(export: Path, rows: torch.Tensor, eval_rows: torch.Tensor | None) -> tuple:
    """(the child's result.json, its logits or None) for `export`."""
    from safetensors.torch import load_file, save_file

    with tempfile.TemporaryDirectory(prefix="release-probe-") as work:
        inputs, output = Path(work) / "in", Path(work) / "out"
        inputs.mkdir()
        output.mkdir()
        tensors = {"probe": rows} | ({"eval": eval_rows} if eval_rows is not None else {})
        save_file(tensors, inputs / probe.PROBE_FILE)
        (inputs / probe.TEXTS_FILE).write_text(json.dumps(PROBE_TEXTS))
        argv = [sys.executable, "-m", probe.__name__, str(export), str(inputs), str(output)]
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_SECONDS
            )
        except subprocess.TimeoutExpired:
            return {"error": f"the load did not finish in {PROBE_TIMEOUT_SECONDS:.0f} s"}, None
        result_file = output / probe.RESULT_FILE
        if not result_file.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"error": f"the probe exited {done.returncode}: {' | '.join(tail)}"}, None
        result = json.loads(result_file.read_text())
        logits_file = output / probe.LOGITS_FILE
        logits = load_file(logits_file)["logits"] if logits_file.is_file() else None
        return result, logits


def _tokenizer_ids(tokenizer_file: str) -> list[list[int]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_file)
    return [tokenizer.encode(text).ids for text in PROBE_TEXTS]


def run_gates(
    export: Path, release: ReleaseManifest, side: TrainingSide, limits: GateLimits
) -> list[Gate]:
    """Every automatic gate of `export` (all but approval), in the order of the table above."""
    gates = [check_files(export, side.checkpoint_id)]
    rows, eval_rows = probe_rows(side)
    digest = hashlib.sha256(rows.numpy().tobytes()).hexdigest()
    result, logits = run_probe(export, rows, eval_rows)
    if "error" in result:
        fix = (
            "install transformers where the gates run (pip install 'runwright[hf]') or release "
            "with --format runwright"
            if "transformers" in result["error"]
            else "export again; if it fails the same way, the export layout is at fault"
        )
        gates.append(
            Gate(name="export.load", verdict="fail", evidence=result["error"][:2000], fix=fix)
        )
        for name in ("tokenizer", "outputs", "eval", "resources"):
            gates.append(
                Gate(name=name, verdict="fail", evidence="not measured: the export did not load")
            )
        return gates
    gates.append(
        Gate(
            name="export.load",
            verdict="pass",
            evidence=f"loaded from its folder alone in a fresh offline process by "
            f"{result['loader']}",
        )
    )
    gates.append(_tokenizer_gate(release, side, result.get("tokenizer_ids")))
    gates.append(_outputs_gate(release, side, rows, logits, digest, limits))
    gates.append(_eval_gate(side, result, limits))
    gates.append(_resources_gate(result, limits))
    return gates


def _tokenizer_gate(
    release: ReleaseManifest, side: TrainingSide, ids: list[list[int]] | None
) -> Gate:
    if side.tokenizer_file is None:
        return Gate(
            name="tokenizer",
            verdict="fail",
            evidence="the run's dataset names no tokenizer (synthetic data?): nothing to carry",
            fix="release a run that trained on a dataset built with a tokenizer",
        )
    problems = []
    if release.tokenizer_sha256 != side.tokenizer_sha256:
        problems.append(
            f"the export's tokenizer sha256 {str(release.tokenizer_sha256)[:12]} is not the "
            f"dataset's {str(side.tokenizer_sha256)[:12]}"
        )
    if ids is None:
        problems.append("the loaded export has no tokenizer")
    else:
        want = _tokenizer_ids(side.tokenizer_file)
        differ = [i for i, (a, b) in enumerate(zip(ids, want, strict=True)) if a != b]
        if differ:
            i = differ[0]
            problems.append(
                f"the loaded tokenizer encodes probe text {i} ({PROBE_TEXTS[i][:30]!r}) as "
                f"{ids[i][:8]}..., the dataset's tokenizer as {want[i][:8]}..."
            )
    if problems:
        return Gate(
            name="tokenizer",
            verdict="fail",
            evidence="; ".join(problems),
            fix="export again from the run (its dataset's tokenizer); do not pass --tokenizer",
        )
    return Gate(
        name="tokenizer",
        verdict="pass",
        evidence=f"the dataset's tokenizer (sha256 {str(side.tokenizer_sha256)[:12]}), and the "
        f"loaded one gives its ids on {len(PROBE_TEXTS)} probe texts",
    )


def _outputs_gate(
    release: ReleaseManifest,
    side: TrainingSide,
    rows: torch.Tensor,
    logits: torch.Tensor | None,
    digest: str,
    limits: GateLimits,
) -> Gate:
    try:
        want = training_logits(side, rows)
    except (RuntimeError, ValueError) as exc:
        return Gate(
            name="outputs",
            verdict="fail",
            evidence=f"the checkpoint's weights do not fit runwright's reference GPT of the "
            f"spec's model section ({str(exc).splitlines()[0][:300]}): the gates compare with "
            "the reference trainer's model only",
            fix="release a checkpoint of the reference trainer, or check the export by hand",
        )
    exact = release.format.value == "runwright"
    tolerance = 0.0 if exact else limits.output_tolerance
    if logits is None or logits.shape != want.shape:
        got = None if logits is None else tuple(logits.shape)
        return Gate(
            name="outputs",
            verdict="fail",
            evidence=f"the export's logits have shape {got}, the training model's "
            f"{tuple(want.shape)}",
            fix="export again; the export's model is not the training model",
        )
    diff = (logits - want).abs().max().item()
    figures = {"max_abs_diff": diff, "tolerance": tolerance, "rows": int(rows.shape[0])}
    figures["probe_sha256"] = digest
    where = f"{rows.shape[0]} probe rows x {rows.shape[1]} tokens (sha256 {digest[:12]})"
    if not math.isfinite(diff) or diff > tolerance:
        return Gate(
            name="outputs",
            verdict="fail",
            evidence=f"the export's logits differ from the training model's by up to {diff:.3g} "
            f"on {where}; allowed {tolerance:.3g}",
            fix="the exported weights are not the checkpoint's: export again, and check the "
            "layout's mapping (docs/ckpt.md, Export)",
            figures=figures,
        )
    said = "bitwise equal to" if diff == 0 else f"within {diff:.3g} of"
    return Gate(
        name="outputs",
        verdict="pass",
        evidence=f"logits {said} the training model's on {where}",
        figures=figures,
    )


def _eval_gate(side: TrainingSide, result: dict[str, Any], limits: GateLimits) -> Gate:
    ours = result.get("eval_loss")
    if ours is None:
        return Gate(
            name="eval",
            verdict="fail",
            evidence="the run's dataset has no eval split to evaluate the export on",
            fix="build the dataset with an eval split (docs/data.md) and train on it",
        )
    if side.train_eval_loss is None:
        return Gate(
            name="eval",
            verdict="fail",
            evidence=f"the export's eval loss is {ours:.4f}, but the run recorded no "
            f"evaluation of checkpoint {side.checkpoint_id}",
            fix="release a checkpoint the run evaluated (training.eval_every_steps; `runwright "
            "events RUN --type EVALUATED` lists them)",
            figures={"eval_loss": ours},
        )
    theirs = side.train_eval_loss
    relative = abs(ours - theirs) / max(abs(theirs), 1e-12)
    figures = {
        "eval_loss": ours,
        "training_eval_loss": theirs,
        "relative_diff": relative,
        "tolerance": limits.eval_tolerance,
        "tokens": result.get("eval_tokens"),
    }
    said = f"{ours:.6f} on {result.get('eval_tokens'):,} eval tokens, the run's {theirs:.6f}"
    if not math.isfinite(ours) or relative > limits.eval_tolerance:
        return Gate(
            name="eval",
            verdict="fail",
            evidence=f"eval loss {said}: {relative:.2%} apart, allowed {limits.eval_tolerance:.2%}",
            fix="the export does not compute what the run evaluated: export again",
            figures=figures,
        )
    return Gate(
        name="eval",
        verdict="pass",
        evidence=f"eval loss {said} ({relative:.2g} apart)",
        figures=figures,
    )


def _resources_gate(result: dict[str, Any], limits: GateLimits) -> Gate:
    seconds, peak = result["load_seconds"], result.get("load_peak_bytes")
    figures = {"load_seconds": seconds, "load_peak_bytes": peak}
    said = f"loads in {seconds:.2f} s" + (
        f", {peak / 2**20:,.1f} MiB peak memory above the process before loading" if peak else ""
    )
    over = []
    if limits.max_load_seconds is not None and seconds > limits.max_load_seconds:
        over.append(f"load time over {limits.max_load_seconds:g} s")
    if limits.max_load_memory_bytes is not None:
        if peak is None:
            over.append("load memory not measurable here (no /proc)")
        elif peak > limits.max_load_memory_bytes:
            over.append(f"load memory over {limits.max_load_memory_bytes / 2**20:,.0f} MiB")
    if over:
        return Gate(
            name="resources",
            verdict="fail",
            evidence=f"{said}: " + "; ".join(over),
            fix="raise the limit if the target can hold it, or release a smaller model",
            figures=figures,
        )
    return Gate(name="resources", verdict="pass", evidence=said, figures=figures)
