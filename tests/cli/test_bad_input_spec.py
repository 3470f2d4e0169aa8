"""Bad input to the spec and run commands, tried as an attacker would (issue 21): every row ends
in exit status 2 with a message naming the file, field, option or argument, never a traceback,
never a hang (each row runs under a 20 s alarm), never a silent pass."""

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from runwright.cli.main import app
from runwright.spec import limits, spec_from_mapping
from runwright.store import Store

EXAMPLES = Path(__file__).parents[2] / "examples"
SKELETON = yaml.safe_load((EXAMPLES / "skeleton.yaml").read_text())
ROW_SECONDS = 20
runner = CliRunner()


def flat(text: str) -> str:
    """The output with rich's error box and line wrapping taken out, for substring checks."""
    for ch in "│╭╮╰╯─":
        text = text.replace(ch, " ")
    return " ".join(text.split())


# -- spec files --------------------------------------------------------------------------------


def text_file(name: str, text: str | bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        path = tmp / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return make


def skeleton_with(mutate: Callable[[dict], object], name: str = "spec.yaml"):
    def make(tmp: Path) -> Path:
        data = json.loads(json.dumps(SKELETON))
        mutate(data)
        path = tmp / name
        path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
        return path

    return make


def at(section: str, **values):
    return lambda d: d.setdefault(section, {}).update(values)


def folder(tmp: Path) -> Path:
    (tmp / "spec.yaml").mkdir()
    return tmp / "spec.yaml"


def fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "spec.yaml")
    return tmp / "spec.yaml"


def oversized(tmp: Path) -> Path:
    path = tmp / "spec.yaml"
    with open(path, "wb") as out:
        out.truncate(limits.MAX_SPEC_BYTES + 1)  # sparse: no 8 MiB written
    return path


def alias_bomb() -> str:
    """Billion laughs: nine levels of nine aliases, 9**9 strings once expanded."""
    names = "abcdefghi"
    lines = ["  a: &a [" + ", ".join(["lol"] * 9) + "]"]
    for prev, cur in itertools.pairwise(names):
        lines.append(f"  {cur}: &{cur} [{', '.join([f'*{prev}'] * 9)}]")
    return "name: x\nanchors:\n" + "\n".join(lines) + "\ngovernance: {stop_criteria: *i}\n"


def deep_flow(levels: int) -> str:
    return "name: x\ngovernance: {tags: " + "[" * levels + "]" * levels + "}\n"


SKELETON_JSON = json.dumps(SKELETON)

SPEC_ROWS: dict[str, tuple[Callable[[Path], Path], list[str]]] = {
    # -- nesting, expansion, size
    "yaml nested 5000 deep": (text_file("spec.yaml", deep_flow(5000)), ["spec.yaml", "nested"]),
    "yaml nested 100 deep": (text_file("spec.yaml", deep_flow(100)), ["nested more than 64"]),
    "yaml block nested 200 deep": (
        text_file("spec.yaml", "".join("  " * i + f"k{i}:\n" for i in range(200))),
        ["nested more than 64", "line 65"],
    ),
    "json nested 100000 deep": (
        text_file("spec.json", '{"name": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        ["spec.json", "nested more than 64"],
    ),
    "json nested 100 deep": (
        text_file("spec.json", '{"a": ' + "[" * 100 + "]" * 100 + "}"),
        ["nested more than 64", "a.0.0"],
    ),
    "toml nested 5000 deep": (
        text_file("spec.toml", "name = " + "[" * 5000 + "]" * 5000 + "\n"),
        ["spec.toml", "nested more than 64"],
    ),
    "yaml alias bomb": (text_file("spec.yaml", alias_bomb()), ["more than 100,000 values"]),
    "yaml self-referencing alias": (
        text_file("spec.yaml", "name: x\ncode: {args: &a [*a]}\n"),
        ["code.args.0", "nested more than 64"],
    ),
    "yaml 200k nodes": (
        text_file("spec.yaml", "name: x\nargs: [" + ",".join(["1"] * 200_000) + "]\n"),
        ["more than 100,000 YAML nodes"],
    ),
    "file over 8 MiB": (oversized, ["spec.yaml", "larger than a spec may be"]),
    # -- not a spec file
    "missing file": (lambda tmp: tmp / "absent.yaml", ["absent.yaml", "no such file"]),
    "folder named like a spec": (folder, ["spec.yaml", "is a folder"]),
    "fifo named like a spec": (fifo, ["spec.yaml", "not a regular file"]),
    "yaml not utf-8": (text_file("spec.yaml", b"name: caf\xe9\n"), ["not UTF-8", "0xe9"]),
    "json not utf-8": (text_file("spec.json", b'{"name": "\xff"}'), ["spec.json", "not UTF-8"]),
    "toml not utf-8": (text_file("spec.toml", b'name = "\xfe"\n'), ["spec.toml", "not UTF-8"]),
    "yaml utf-16": (
        text_file("spec.yaml", "name: x\n".encode("utf-16")),
        ["spec.yaml", "not UTF-8"],
    ),
    "empty yaml": (text_file("spec.yaml", ""), ["spec.yaml", "the spec is empty"]),
    "comments-only yaml": (text_file("spec.yaml", "# nothing\n"), ["the spec is empty"]),
    "empty json": (text_file("spec.json", ""), ["spec.json", "not valid JSON"]),
    "empty toml": (text_file("spec.toml", ""), ["spec.toml", "name: required field"]),
    "top-level list": (text_file("spec.yaml", "- 1\n- 2\n"), ["mapping of sections", "list"]),
    "top-level scalar json": (text_file("spec.json", "3"), ["mapping of sections", "int"]),
    "top-level string yaml": (text_file("spec.yaml", "just words"), ["mapping of sections"]),
    "unknown suffix": (text_file("spec.txt", "name: x"), ["unknown spec format"]),
    # -- silently resolved ambiguity, parser corners
    "yaml duplicate key": (
        text_file("spec.yaml", "name: a\nname: b\n"),
        ["'name' appears twice", "line 2"],
    ),
    "yaml duplicate nested key": (
        text_file("spec.yaml", "name: a\ntraining:\n  steps: 1\n  steps: 1000\n"),
        ["'steps' appears twice"],
    ),
    "json duplicate key": (
        text_file("spec.json", '{"name": "a", "name": "b"}'),
        ["'name' appears twice"],
    ),
    "json 5000-digit integer": (
        text_file("spec.json", '{"name": ' + "9" * 5000 + "}"),
        ["spec.json", "not a valid JSON value"],
    ),
    "yaml 5000-digit integer": (
        text_file("spec.yaml", "name: x\ntraining: {steps: " + "9" * 5000 + "}\n"),
        ["not a valid YAML value"],
    ),
    "yaml python tag": (
        text_file("spec.yaml", "name: !!python/object/apply:os.system [echo hi]\n"),
        ["not valid YAML"],
    ),
    "yaml two documents": (text_file("spec.yaml", "name: a\n---\nname: b\n"), ["not valid YAML"]),
    "NUL inside a string": (
        skeleton_with(at("code", entrypoint="train\x00.py")),
        ["code.entrypoint", "NUL"],
    ),
    "non-string key": (
        text_file("spec.yaml", "name: x\ngovernance: {tags: {yes: 1}}\n"),
        ["governance.tags.True", "not a string"],
    ),
    # -- absurd numbers: each derivation must stay bounded (the 2**70 batch used to hang)
    "global batch 2**70": (
        skeleton_with(at("training", global_batch_samples=2**70)),
        ["training.global_batch_samples", "less than or equal to 16777216"],
    ),
    "global batch 2**70 in json": (
        skeleton_with(at("training", global_batch_samples=2**70), "spec.json"),
        ["training.global_batch_samples"],
    ),
    "batch tokens 2**70": (
        skeleton_with(at("training", global_batch_samples=None, global_batch_tokens=2**70)),
        ["training.global_batch_tokens"],
    ),
    "batch tokens giving too many samples": (
        skeleton_with(at("training", global_batch_samples=None, global_batch_tokens=2**36)),
        ["training.global_batch_tokens", "samples per step"],
    ),
    "micro batch 2**70": (
        skeleton_with(at("training", micro_batch_size=2**70)),
        ["training.micro_batch_size"],
    ),
    "batch 2**24 with odd micro batch": (
        skeleton_with(at("training", global_batch_samples=2**24, micro_batch_size=3)),
        ["micro_batch_size in"],
    ),
    "steps 2**70": (skeleton_with(at("training", steps=2**70)), ["training.steps"]),
    "steps as 1e30 float": (skeleton_with(at("training", steps=1e30)), ["training.steps"]),
    "token budget 1e16": (
        skeleton_with(at("training", steps=None, token_budget=10**16)),
        ["training.token_budget"],
    ),
    "token budget giving 1e15 steps": (
        skeleton_with(
            lambda d: (
                d["training"].update(steps=None, token_budget=10**15, global_batch_samples=1),
                d["data"].update(sequence_length=1),
                d["resources"].update(devices_per_node=1),
            )
        ),
        ["training.token_budget", "steps, more than 1000000000"],
    ),
    "sequence length 2**40": (
        skeleton_with(at("data", sequence_length=2**40)),
        ["data.sequence_length"],
    ),
    "d_model 2**40": (skeleton_with(at("model", d_model=2**40)), ["model.d_model"]),
    "n_layers 2**40": (skeleton_with(at("model", n_layers=2**40)), ["model.n_layers"]),
    "vocab 2**40": (skeleton_with(at("model", vocab_size=2**40)), ["model.vocab_size"]),
    "nodes 2**40": (skeleton_with(at("resources", nodes=2**40)), ["resources.nodes"]),
    "devices per node 1e6": (
        skeleton_with(at("resources", devices_per_node=10**6)),
        ["resources.devices_per_node"],
    ),
    "tp 2**40": (skeleton_with(at("parallelism", tp=2**40)), ["parallelism.tp"]),
    "tp not dividing the heads": (
        skeleton_with(lambda d: (d["parallelism"].update(tp=2), d["model"].update(n_heads=1))),
        ["parallelism.tp=2 must divide model.n_heads=1", "valid tp: [1]"],
    ),
    "tp with ddp at dp > 1": (
        skeleton_with(
            lambda d: (d["parallelism"].update(tp=2), d["resources"].update(devices_per_node=4))
        ),
        ["needs parallelism.dp_mode: fsdp2"],
    ),
    "fp16 on cpu": (
        skeleton_with(at("training", precision="fp16")),
        ["training.precision=fp16 needs resources.device_type: cuda", "precision: bf16"],
    ),
    "loss spike ratio 1": (
        skeleton_with(at("training", loss_spike={"threshold_ratio": 1})),
        ["training.loss_spike.threshold_ratio"],
    ),
    "integrity every -1 steps": (
        skeleton_with(at("training", integrity={"every_steps": -1})),
        ["training.integrity.every_steps", "0 (checks off) or a positive number of steps"],
    ),
    "dp 2**40": (skeleton_with(at("parallelism", dp=2**40)), ["parallelism.dp"]),
    "seed 2**64": (skeleton_with(at("training", seed=2**64)), ["training.seed"]),
    "negative data seed": (skeleton_with(at("data", seed=-1)), ["data.seed"]),
    "priority 2**70": (skeleton_with(at("resources", priority=2**70)), ["resources.priority"]),
    "lr nan": (
        text_file("spec.yaml", yaml.safe_dump(SKELETON).replace("lr: 0.05", "lr: .nan")),
        ["training.optimizer.lr", "finite"],
    ),
    "timeout inf": (
        skeleton_with(at("recovery", heartbeat_timeout_seconds=float("inf"))),
        ["recovery.heartbeat_timeout_seconds"],
    ),
    "backoff 1e300 seconds": (
        skeleton_with(
            at("recovery", policies={"hang": {"backoff_seconds": 1e300, "max_retries": 1}})
        ),
        ["recovery.policies.hang.backoff_seconds"],
    ),
    "max retries 1e9": (
        skeleton_with(at("recovery", max_total_restarts=10**9)),
        ["recovery.max_total_restarts"],
    ),
    "budget wall 1e300 seconds": (
        skeleton_with(at("budget", wall_seconds=1e300)),
        ["budget.wall_seconds"],
    ),
    "adam beta 2": (
        skeleton_with(lambda d: d["training"]["optimizer"].update(betas=[2, 0.5])),
        ["training.optimizer.betas", "[0, 1)"],
    ),
    "env name with =": (
        skeleton_with(at("environment", env={"A=B": "1"})),
        ["environment.env", "A=B"],
    ),
    # -- wrong types and floods of problems
    "steps a list": (skeleton_with(at("training", steps=[1, 2])), ["training.steps"]),
    "training a string": (skeleton_with(lambda d: d.update(training="x")), ["training"]),
    "100k-character name": (
        skeleton_with(lambda d: d.update(name="x" * 100_000)),
        ["name:", "characters)"],
    ),
    "5000 bad arguments": (
        skeleton_with(at("code", args=list(range(5000)))),
        ["code.args.0", "... and 4980 more"],
    ),
}


def _assert_clear_refusal(result, expected: list[str]) -> None:
    out = flat(result.output)
    assert result.exit_code == 2, result.output[-2000:]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    for part in expected:
        assert part in out, (part, out[-2000:])
    assert len(result.output) < 20_000, "the message is bounded"


@pytest.mark.parametrize("case", list(SPEC_ROWS), ids=list(SPEC_ROWS))
def test_bad_spec_is_refused_clearly_and_quickly(tmp_path, case, time_bound):
    make, expected = SPEC_ROWS[case]
    path = make(tmp_path)
    with time_bound(ROW_SECONDS):
        result = runner.invoke(app, ["spec", "validate", str(path)])
    _assert_clear_refusal(result, expected)


# Every command that loads a spec refuses the worst of them the same way.
WORST = ["yaml nested 5000 deep", "json nested 100000 deep", "global batch 2**70"]


@pytest.mark.parametrize("command", ["hash", "explain", "submit"])
@pytest.mark.parametrize("case", WORST)
def test_every_spec_command_refuses_the_worst(tmp_path, case, command, time_bound):
    make, expected = SPEC_ROWS[case]
    path = make(tmp_path)
    argv = ["spec", command, str(path)]
    if command == "submit":
        argv = ["submit", str(path), "--root", str(tmp_path / "root")]
    with time_bound(ROW_SECONDS):
        result = runner.invoke(app, argv)
    _assert_clear_refusal(result, expected)
    assert not (tmp_path / "root" / "runs").exists(), "nothing written for a refused spec"


def test_the_hang_case_returns_in_a_real_process(tmp_path):
    """The issue's reproduction, end to end: `spec validate` of a 2**70 batch used to spin in a
    divisor loop forever."""
    path = SPEC_ROWS["global batch 2**70"][0](tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "runwright.cli.main", "spec", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "training.global_batch_samples" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_the_largest_accepted_batch_resolves_at_once(time_bound):
    """At the bounds, every derivation still finishes (divisors are O(sqrt(n)))."""
    data = json.loads(SKELETON_JSON)
    data["training"].update(global_batch_samples=limits.MAX_BATCH_SAMPLES, steps=limits.MAX_STEPS)
    with time_bound(ROW_SECONDS):
        plan = spec_from_mapping(data).plan
    assert plan.micro_batch_size.value == 8
    assert plan.grad_accumulation_steps.value == limits.MAX_BATCH_SAMPLES // (2 * 8)


# -- run commands: options and run ids ---------------------------------------------------------


def with_run(tmp: Path) -> str:
    """A run in the store under `tmp`, for the options checked after the lookup."""
    spec = spec_from_mapping(json.loads(SKELETON_JSON))
    store = Store.open(tmp)
    store.create_run(
        run_id="skeleton-run",
        name=spec.name,
        spec=spec.model_dump(mode="json"),
        spec_hash=spec.spec_hash,
        plan=spec.plan.model_dump(mode="json"),
        workdir=str(tmp),
        root=str(tmp),
        state="CREATED",
    )
    store.close()
    (tmp / "a-file").write_text("")
    return "skeleton-run"


LONG = "a" * 300
RUN_ROWS: dict[str, tuple[list[str], list[str]]] = {
    "list --limit -1": (["list", "--limit", "-1"], ["'--limit'", "greater than or equal to 1"]),
    "list --limit 0": (["list", "--limit", "0"], ["'--limit'"]),
    "list --limit 1e20": (["list", "--limit", str(10**20)], ["'--limit'"]),
    "list --limit text": (["list", "--limit", "many"], ["'--limit'"]),
    "status ../x": (["status", "../x"], ["'run_id'", "not a run id"]),
    "status a/b": (["status", "a/b"], ["'run_id'", "no `/`"]),
    "status ..": (["status", ".."], ["'run_id'", "not a run id"]),
    "status absolute path": (["status", "/etc/passwd"], ["'run_id'"]),
    "status empty": (["status", ""], ["'run_id'", "cannot be empty"]),
    "status NUL": (["status", "a\x00b"], ["'run_id'", "not a run id"]),
    "status over-long": (["status", LONG], ["'run_id'", "at most 200 characters"]),
    "status unknown": (["status", "no-such-run"], ["no run 'no-such-run'", "runwright list"]),
    "events ../x": (["events", "../x"], ["'run_id'"]),
    "events --type typo": (
        ["events", "skeleton-run", "--type", "STEP_ENDED_"],
        ["'--type'", "not an event type"],
    ),
    "cancel ../x": (["cancel", "../x"], ["'run_id'"]),
    "cancel empty reason": (["cancel", "skeleton-run", "--reason", " "], ["'--reason'"]),
    "cancel 3000-char reason": (
        ["cancel", "skeleton-run", "--reason", "r" * 3000],
        ["'--reason'", "at most 2,000 characters"],
    ),
    "cancel NUL reason": (["cancel", "skeleton-run", "--reason", "a\x00"], ["NUL"]),
    "compare bad second id": (["compare", "skeleton-run", "../b"], ["'run_b'"]),
    "compare bad first id": (["compare", "a/..", "skeleton-run"], ["'run_a'"]),
    "report ../x": (["report", "../../x"], ["'run_id'"]),
    "report --out is a file": (
        ["report", "skeleton-run", "--out", "{tmp}/a-file"],
        ["cannot write the report", "a-file"],
    ),
    "controller ../x": (["controller", "../x"], ["'run_id'"]),
    "submit empty idempotency key": (
        ["submit", str(EXAMPLES / "skeleton.yaml"), "--idempotency-key", ""],
        ["'--idempotency-key'", "cannot be empty"],
    ),
    "submit over-long idempotency key": (
        ["submit", str(EXAMPLES / "skeleton.yaml"), "--idempotency-key", LONG],
        ["'--idempotency-key'", "at most 200"],
    ),
    "--root is a file": (["list", "--root", "{tmp}/a-file"], ["a-file"]),
}


@pytest.mark.parametrize("case", list(RUN_ROWS), ids=list(RUN_ROWS))
def test_bad_run_option_or_id_is_refused(tmp_path, case, time_bound):
    argv, expected = RUN_ROWS[case]
    with_run(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if "--root" not in argv:
        argv += ["--root", str(tmp_path)]
    with time_bound(ROW_SECONDS):
        result = runner.invoke(app, argv)
    _assert_clear_refusal(result, expected)
    assert not (tmp_path / "runs").exists(), "a refused command builds no run folder"
