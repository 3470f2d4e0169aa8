"""`runwright plan ...`: capacity planning from flags or a spec. Parse, call one function in
`runwright.plan`, render a table with units (or `--json`)."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from rich.table import Table

from runwright.cli.render import console, guarded, print_json
from runwright.plan import (
    Cluster,
    Link,
    MemoryLedger,
    Offload,
    PlanError,
    Recompute,
    StateBytes,
    Workload,
    ZeroStage,
    activation_bytes_per_device,
    activation_bytes_per_layer,
    collective_table,
    memory_ledger,
    parameters_per_device,
    plan_interval,
    scaling_efficiency,
    search_layouts,
)
from runwright.plan.base import GIB
from runwright.spec import JobSpec, ModelSpec, load_spec

app = typer.Typer(
    help="Capacity planning: memory and communication ledgers, checkpoint interval, parallel "
    "layout search, scaling efficiency.",
    no_args_is_help=True,
)

T = TypeVar("T")

SpecOpt = Annotated[
    Path | None,
    typer.Option(
        "--spec",
        help="Job spec file; its model (and data, training, resources) "
        "sections supply defaults that flags override.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
LayersOpt = Annotated[int | None, typer.Option("--layers", help="Transformer blocks (L).")]
DModelOpt = Annotated[int | None, typer.Option("--d-model", help="Hidden size (h).")]
HeadsOpt = Annotated[int | None, typer.Option("--heads", help="Attention heads (a).")]
DffOpt = Annotated[int | None, typer.Option("--d-ff", help="MLP inner size; default 4 x d-model.")]
VocabOpt = Annotated[int | None, typer.Option("--vocab", help="Vocabulary size (V).")]
SeqOpt = Annotated[int | None, typer.Option("--seq-len", help="Tokens per sequence (s).")]
MicroOpt = Annotated[
    int | None, typer.Option("--micro-batch-size", help="Sequences per rank per forward (b).")
]
ZeroOpt = Annotated[
    int, typer.Option("--zero-stage", min=0, max=3, help="ZeRO stage 0-3 over the dp group.")
]
RecomputeOpt = Annotated[Recompute, typer.Option("--recompute", help="Activation recomputation.")]
SpOpt = Annotated[
    bool, typer.Option("--sequence-parallel", help="Megatron sequence parallelism (with tp).")
]
HeadroomOpt = Annotated[
    float, typer.Option("--headroom", help="Fraction of device memory kept free, in [0, 1).")
]
MemoryGibOpt = Annotated[
    float | None, typer.Option("--device-memory-gib", help="Memory per device (GiB).")
]


def _validated(build: Callable[[], T], what: str) -> T:
    """Build a record, turning pydantic's complaint into a one-paragraph user error."""
    try:
        return build()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or what}: "
            f"{str(err['msg']).removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise PlanError(f"invalid {what}: {problems}") from None


def _spec(path: Path | None) -> JobSpec | None:
    return None if path is None else load_spec(path)


def _pick(flag: T | None, from_spec: T | None, default: T | None = None) -> T | None:
    return flag if flag is not None else from_spec if from_spec is not None else default


def _model(
    spec: JobSpec | None,
    layers: int | None,
    d_model: int | None,
    heads: int | None,
    d_ff: int | None,
    vocab: int | None,
) -> ModelSpec:
    base = spec.model if spec is not None else None
    if base is None and None in (layers, d_model, heads):
        raise PlanError(
            "give the model: --spec FILE, or at least --layers, --d-model and --heads "
            "(and --vocab, --d-ff to override their defaults)"
        )
    fields: dict[str, Any] = base.model_dump() if base is not None else {}
    given = {
        "n_layers": layers,
        "d_model": d_model,
        "n_heads": heads,
        "d_ff": d_ff,
        "vocab_size": vocab,
    }
    fields.update({k: v for k, v in given.items() if v is not None})
    return _validated(lambda: ModelSpec(**fields), "model")


def _gib(value: float | None) -> int | None:
    return None if value is None else round(value * GIB)


def _size(num_bytes: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.2f} {unit}"
    return f"{num_bytes:,.0f} B"


def _seconds(value: float) -> str:
    if value >= 3600:
        return f"{value:,.0f} s ({value / 3600:.2f} h)"
    if value >= 60:
        return f"{value:,.0f} s ({value / 60:.1f} min)"
    if value >= 1:
        return f"{value:.3f} s"
    return f"{value * 1e3:.3f} ms"


def _render_ledger(ledger: MemoryLedger, title: str) -> None:
    table = Table(title=title)
    table.add_column("row")
    table.add_column("bytes per device", justify="right")
    table.add_column("GiB", justify="right")
    for name, value in ledger.rows():
        style = "bold" if name == "total" else None
        table.add_row(name, f"{value:,.0f}", f"{value / GIB:,.3f}", style=style)
    console.print(table)
    if ledger.host_bytes:
        console.print(f"offloaded to host memory: {_size(ledger.host_bytes)} per device")
    if ledger.fits is not None and ledger.usable_bytes is not None:
        verdict = "[green]fits[/]" if ledger.fits else "[red]does not fit[/]"
        console.print(
            f"{verdict}: {_size(ledger.total_bytes)} of {_size(ledger.usable_bytes)} usable "
            f"({_size(ledger.device_memory_bytes or 0)} less "
            f"{100 * ledger.headroom_fraction:.0f}% headroom)"
        )
    console.print(f"[dim]{ledger.note}[/]")


@app.command()
@guarded
def memory(
    spec_file: SpecOpt = None,
    layers: LayersOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    d_ff: DffOpt = None,
    vocab: VocabOpt = None,
    dp: Annotated[int | None, typer.Option("--dp", help="Data-parallel degree (D).")] = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor-parallel degree (t).")] = None,
    pp: Annotated[int | None, typer.Option("--pp", help="Pipeline-parallel degree.")] = None,
    zero_stage: ZeroOpt = 0,
    offload: Annotated[Offload, typer.Option("--offload", help="Move states to host.")] = (
        Offload.NONE
    ),
    seq_len: SeqOpt = None,
    micro_batch_size: MicroOpt = None,
    sequence_parallel: SpOpt = False,
    recompute: RecomputeOpt = Recompute.NONE,
    parameter_bytes: Annotated[float, typer.Option(help="Bytes per working weight.")] = 2.0,
    gradient_bytes: Annotated[float, typer.Option(help="Bytes per gradient.")] = 2.0,
    optimizer_bytes: Annotated[
        float, typer.Option(help="Optimizer-state bytes per parameter (ZeRO's K).")
    ] = 12.0,
    buffers_gib: Annotated[
        float, typer.Option("--buffers-gib", help="Declared buffers per device (GiB).")
    ] = 0.0,
    device_memory_gib: MemoryGibOpt = None,
    headroom: HeadroomOpt = 0.1,
    as_json: JsonOpt = False,
) -> None:
    """Per-device memory ledger: ZeRO model states, activations, buffers, and the fit."""
    spec = _spec(spec_file)
    model = _model(spec, layers, d_model, heads, d_ff, vocab)
    dp_ = _pick(dp, spec.plan.dp.value if spec else None, 1)
    tp_ = _pick(tp, spec.parallelism.tp if spec else None, 1)
    pp_ = _pick(pp, spec.parallelism.pp if spec else None, 1)
    seq = _pick(seq_len, spec.data.sequence_length if spec else None, 2048)
    micro = _pick(micro_batch_size, spec.plan.micro_batch_size.value if spec else None, 1)
    capacity = _pick(_gib(device_memory_gib), spec.resources.device_memory_bytes if spec else None)
    state = _validated(
        lambda: StateBytes(
            parameter_bytes=parameter_bytes,
            gradient_bytes=gradient_bytes,
            optimizer_bytes=optimizer_bytes,
        ),
        "bytes per parameter",
    )
    per_layer = activation_bytes_per_layer(
        seq, micro, model.d_model, model.n_heads, tp_, sequence_parallel, recompute
    )
    ledger = memory_ledger(
        parameters_per_device(model, tp_, pp_),
        activations_bytes=activation_bytes_per_device(per_layer, model.n_layers, pp_),
        dp=dp_,
        zero_stage=ZeroStage(zero_stage),
        state=state,
        offload=offload,
        buffers_bytes=buffers_gib * GIB,
        device_memory_bytes=capacity,
        headroom_fraction=headroom,
    )
    if as_json:
        print_json(
            {
                "model": {**model.model_dump(), "parameter_count": model.parameter_count},
                "layout": {
                    "dp": dp_,
                    "tp": tp_,
                    "pp": pp_,
                    "zero_stage": zero_stage,
                    "offload": offload.value,
                },
                "activations": {
                    "sequence_length": seq,
                    "micro_batch_size": micro,
                    "sequence_parallel": sequence_parallel,
                    "recompute": recompute.value,
                    "bytes_per_layer": per_layer,
                },
                "ledger": ledger.model_dump(mode="json"),
            }
        )
        return
    _render_ledger(
        ledger,
        f"memory per device: {model.parameter_count:,} parameters, dp={dp_} tp={tp_} "
        f"pp={pp_}, ZeRO-{zero_stage}, s={seq} b={micro}, recompute={recompute.value}",
    )


@app.command()
@guarded
def comm(
    payload_bytes: Annotated[
        float | None,
        typer.Option(
            "--bytes",
            help="Per-rank payload G (bytes); default: the model's gradient bytes per device.",
        ),
    ] = None,
    ranks: Annotated[
        int | None, typer.Option("--ranks", help="Group size D (default: the spec's dp).")
    ] = None,
    latency_microseconds: Annotated[
        float, typer.Option("--latency-microseconds", help="alpha per round (µs).")
    ] = 10.0,
    bandwidth_gb_per_second: Annotated[
        float, typer.Option("--bandwidth-gb-per-second", help="beta (GB/s, 1e9 bytes/s).")
    ] = 25.0,
    microbatches: Annotated[
        int, typer.Option("--microbatches", help="Micro-batches per step (pipeline row).")
    ] = 1,
    spec_file: SpecOpt = None,
    layers: LayersOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    d_ff: DffOpt = None,
    vocab: VocabOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ring collective ledger: bytes each rank sends and alpha-beta time per operation."""
    spec = _spec(spec_file)
    if payload_bytes is None:
        model = _model(spec, layers, d_model, heads, d_ff, vocab)
        tp = spec.parallelism.tp if spec else 1
        pp = spec.parallelism.pp if spec else 1
        payload_bytes = 2.0 * parameters_per_device(model, tp, pp)
    group = _pick(ranks, spec.plan.dp.value if spec else None)
    if group is None:
        raise PlanError("give the group size: --ranks D, or --spec FILE to use its dp")
    link = _validated(
        lambda: Link(
            latency_seconds=latency_microseconds * 1e-6,
            bandwidth_bytes_per_second=bandwidth_gb_per_second * 1e9,
        ),
        "link",
    )
    rows = collective_table(payload_bytes, group, link, microbatches)
    if as_json:
        print_json({"link": link.model_dump(), "collectives": [r.model_dump() for r in rows]})
        return
    table = Table(
        title=f"ring collectives: G = {_size(payload_bytes)}, D = {group}, "
        f"alpha = {latency_microseconds:g} µs, beta = {bandwidth_gb_per_second:g} GB/s"
    )
    for column in ("operation", "rounds", "sent per rank", "bytes sent per rank", "time"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for r in rows:
        table.add_row(
            r.collective.value,
            str(r.rounds),
            _size(r.bytes_sent_per_rank),
            f"{r.bytes_sent_per_rank:,.0f}",
            _seconds(r.seconds),
        )
    console.print(table)
    console.print(
        f"[dim]pipeline-boundary: {microbatches} micro-batch(es), one activation forward and "
        "one gradient backward each; bytes received are not counted[/]"
    )


@app.command()
@guarded
def interval(
    checkpoint_seconds: Annotated[
        float, typer.Option("--checkpoint-seconds", help="C: blocking cost of one checkpoint (s).")
    ],
    mtbf_seconds: Annotated[
        float | None,
        typer.Option(
            "--mtbf-seconds",
            help="M: job-level mean time between interruptions (s); "
            "default: the spec's checkpoint.interval.mtbf_seconds.",
        ),
    ] = None,
    restart_seconds: Annotated[
        float, typer.Option("--restart-seconds", help="R: restore and verify time (s).")
    ] = 0.0,
    detect_seconds: Annotated[
        float, typer.Option("--detect-seconds", help="D: detect and requeue delay (s).")
    ] = 0.0,
    step_seconds: Annotated[
        float | None, typer.Option("--step-seconds", help="Step time (s), to show steps.")
    ] = None,
    intervals: Annotated[
        list[float] | None,
        typer.Option("--interval", help="Interval to tabulate (s); repeat for several."),
    ] = None,
    spec_file: SpecOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Young's and Daly's checkpoint interval and the expected waste W(T) across intervals."""
    spec = _spec(spec_file)
    mtbf = _pick(mtbf_seconds, spec.checkpoint.interval.mtbf_seconds if spec else None)
    if mtbf is None:
        raise PlanError(
            "give the mean time between interruptions: --mtbf-seconds M, or a spec with "
            "checkpoint.interval.mtbf_seconds"
        )
    result = plan_interval(
        checkpoint_seconds, mtbf, restart_seconds, detect_seconds, step_seconds, intervals
    )
    if as_json:
        print_json(result.model_dump())
        return
    console.print(
        f"Young: T = sqrt(2 x {checkpoint_seconds:g} s x {mtbf:g} s) = "
        f"{_seconds(result.young_seconds)};  Daly: {_seconds(result.daly_seconds)}"
    )
    table = Table(title="expected waste W(T) = C/T + T/(2M) + (R+D)/M")
    for column in ("interval", "T s", "T min", "steps", "W(T)", "pause C/(T+C)", "Daly waste"):
        table.add_column(column, justify="left" if column == "interval" else "right")
    for r in result.rows:
        table.add_row(
            r.label,
            f"{r.interval_seconds:,.0f}",
            f"{r.interval_seconds / 60:,.1f}",
            "-" if r.interval_steps is None else f"{r.interval_steps:,}",
            f"{100 * r.expected_waste_fraction:.2f}%",
            f"{100 * r.pause_share:.2f}%",
            f"{100 * r.daly_waste_fraction:.2f}%",
            style="bold" if r.label == "young" else None,
        )
    console.print(table)
    console.print(f"[dim]assumes {result.assumptions}[/]")


def _int(value: int | float | None) -> int | None:
    return None if value is None else int(value)


@app.command()
@guarded
def parallel(
    spec_file: SpecOpt = None,
    layers: LayersOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    d_ff: DffOpt = None,
    vocab: VocabOpt = None,
    world_size: Annotated[
        int | None,
        typer.Option(
            "--world-size", help="Devices (default: the spec's nodes x devices_per_node)."
        ),
    ] = None,
    devices_per_node: Annotated[
        int | None, typer.Option("--devices-per-node", help="Devices per node.")
    ] = None,
    device_memory_gib: MemoryGibOpt = None,
    peak_tflops: Annotated[
        float | None,
        typer.Option(
            "--peak-tflops",
            help="Declared peak per device (TFLOP/s, dense, at the training dtype).",
        ),
    ] = None,
    mfu: Annotated[
        float, typer.Option("--mfu", help="Assumed model FLOPs utilisation in (0, 1].")
    ] = 0.4,
    seq_len: SeqOpt = None,
    global_batch_samples: Annotated[
        int | None, typer.Option("--global-batch-samples", help="Sequences per step.")
    ] = None,
    micro_batch_size: MicroOpt = None,
    zero_stage: ZeroOpt = 0,
    recompute: RecomputeOpt = Recompute.NONE,
    sequence_parallel: SpOpt = False,
    headroom: HeadroomOpt = 0.1,
    buffers_gib: Annotated[
        float, typer.Option("--buffers-gib", help="Declared buffers per device (GiB).")
    ] = 0.0,
    intra_node_gb_per_second: Annotated[
        float, typer.Option("--intra-node-gb-per-second", help="In-node bandwidth (GB/s).")
    ] = 150.0,
    inter_node_gb_per_second: Annotated[
        float, typer.Option("--inter-node-gb-per-second", help="Per-device network (GB/s).")
    ] = 25.0,
    latency_microseconds: Annotated[
        float, typer.Option("--latency-microseconds", help="alpha per round, both links (µs).")
    ] = 10.0,
    top: Annotated[int, typer.Option("--top", min=1, help="Accepted layouts to show.")] = 10,
    as_json: JsonOpt = False,
) -> None:
    """Enumerate (dp, tp, pp), reject what cannot run (with why), rank the rest by step time."""
    spec = _spec(spec_file)
    model = _model(spec, layers, d_model, heads, d_ff, vocab)
    res = spec.resources if spec else None
    per_node = _pick(devices_per_node, res.devices_per_node if res else None, 8)
    world = _pick(world_size, res.world_size if res else None)
    capacity = _pick(_gib(device_memory_gib), res.device_memory_bytes if res else None)
    peak = _pick(
        None if peak_tflops is None else peak_tflops * 1e12,
        res.peak_flops_per_device if res else None,
    )
    missing = [
        name
        for name, value in (
            ("--world-size", world),
            ("--device-memory-gib", capacity),
            ("--peak-tflops", peak),
        )
        if value is None
    ]
    gbs = _pick(global_batch_samples, _int(spec.plan.global_batch_samples.value) if spec else None)
    if gbs is None:
        missing.append("--global-batch-samples")
    if missing:
        raise PlanError(
            f"give {', '.join(missing)} (or a --spec whose resources and training "
            "sections declare them)"
        )
    links = {
        name: _validated(
            lambda gbps=gbps: Link(
                latency_seconds=latency_microseconds * 1e-6, bandwidth_bytes_per_second=gbps * 1e9
            ),
            name,
        )
        for name, gbps in (
            ("intra_node", intra_node_gb_per_second),
            ("inter_node", inter_node_gb_per_second),
        )
    }
    cluster = _validated(
        lambda: Cluster(
            world_size=world,
            devices_per_node=per_node,
            device_memory_bytes=capacity,
            peak_flops_per_device=peak,
            headroom_fraction=headroom,
            same_node_tp=res.same_node_tp if res else True,
            **links,
        ),
        "cluster",
    )
    work = _validated(
        lambda: Workload(
            model=model,
            sequence_length=_pick(seq_len, spec.data.sequence_length if spec else None, 2048),
            global_batch_samples=gbs,
            micro_batch_size=_pick(
                micro_batch_size, spec.training.micro_batch_size if spec else None, 1
            ),
            zero_stage=ZeroStage(zero_stage),
            recompute=recompute,
            sequence_parallel=sequence_parallel,
            buffers_bytes=buffers_gib * GIB,
            mfu=mfu,
        ),
        "workload",
    )
    result = search_layouts(cluster, work)
    if as_json:
        print_json(
            {
                "cluster": cluster.model_dump(),
                "workload": work.model_dump(mode="json"),
                **result.model_dump(mode="json"),
            }
        )
        return
    table = Table(
        title=f"layouts for {world} devices, {model.parameter_count:,} parameters, "
        f"fastest estimated step first"
    )
    table.caption = "m: micro-batches per step; dp/tp/pp s: communication seconds per step"
    columns = ("dp", "tp", "pp", "m", "mem GiB", "compute s", "bubble s", "dp s", "tp s")
    for column in (*columns, "pp s", "step s"):
        table.add_column(column, justify="right")
    for e in result.accepted[:top]:
        table.add_row(
            str(e.layout.dp),
            str(e.layout.tp),
            str(e.layout.pp),
            str(e.microbatches),
            f"{e.memory.total_bytes / GIB:.1f}",
            f"{e.compute_seconds:.3f}",
            f"{e.bubble_seconds:.3f}",
            f"{e.dp_comm_seconds:.3f}",
            f"{e.tp_comm_seconds:.3f}",
            f"{e.pp_comm_seconds:.3f}",
            f"{e.step_seconds:.3f}",
        )
    console.print(table)
    if len(result.accepted) > top:
        console.print(f"[dim]{len(result.accepted) - top} more accepted; raise --top[/]")
    if result.rejected:
        rejected = Table(title="rejected layouts")
        for column in ("dp", "tp", "pp", "why"):
            rejected.add_column(column, justify="left" if column == "why" else "right")
        for r in result.rejected:
            rejected.add_row(
                str(r.layout.dp), str(r.layout.tp), str(r.layout.pp), "; ".join(r.reasons)
            )
        console.print(rejected)
    console.print(f"[dim]assumes {result.assumptions}[/]")


def _read_measurements(path: Path) -> list[tuple[int, float]]:
    """A JSON list of {"world_size": N, "tokens_per_second": X} objects or [N, X] pairs."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PlanError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(f"{path}: cannot read measurements as JSON: {exc}") from None
    pairs: list[tuple[int, float]] = []
    for i, item in enumerate(data if isinstance(data, list) else [None]):
        if isinstance(item, dict) and {"world_size", "tokens_per_second"} <= item.keys():
            pairs.append((item["world_size"], item["tokens_per_second"]))
        elif isinstance(item, list) and len(item) == 2:
            pairs.append((item[0], item[1]))
        else:
            raise PlanError(
                f'{path}: entry {i} is not {{"world_size": N, "tokens_per_second": X}} '
                "or [N, X]; the file must be a JSON list of those"
            )
    for world, tps in pairs:
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (world, tps)):
            raise PlanError(
                f"{path}: world_size and tokens_per_second must be numbers, got "
                f"{world!r} and {tps!r}"
            )
    return pairs


def _parse_point(text: str) -> tuple[int, float]:
    world, sep, tps = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return int(world), float(tps)
    except ValueError:
        raise PlanError(
            f"--point {text!r} is not WORLD_SIZE:TOKENS_PER_SECOND, e.g. --point 8:61000"
        ) from None


@app.command()
@guarded
def scaling(
    points: Annotated[
        list[str] | None,
        typer.Option("--point", help="WORLD_SIZE:TOKENS_PER_SECOND; repeat for each run."),
    ] = None,
    measurements: Annotated[
        Path | None,
        typer.Option(
            "--measurements",
            help='JSON list of {"world_size": N, "tokens_per_second": X} (or [N, X]) measurements.',
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Scaling efficiency E(N) = throughput(N) / (N x throughput(1)) from measurements."""
    pairs = [_parse_point(p) for p in points or []]
    if measurements is not None:
        pairs += _read_measurements(measurements)
    report = scaling_efficiency(pairs)
    if as_json:
        print_json(report.model_dump())
        return
    table = Table(title=f"scaling efficiency against world size {report.baseline_world_size}")
    for column in (
        "world size",
        "tokens/s",
        "tokens/s per device",
        "speedup",
        "efficiency",
        "runs",
    ):
        table.add_column(column, justify="right")
    for p in report.points:
        table.add_row(
            str(p.world_size),
            f"{p.tokens_per_second:,.0f}",
            f"{p.tokens_per_second_per_device:,.0f}",
            f"{p.speedup:.2f}x",
            f"{100 * p.efficiency:.1f}%",
            str(p.measurements),
        )
    console.print(table)
    if report.baseline_world_size != 1:
        console.print(
            f"[dim]no single-device run: E(N) is relative to world size "
            f"{report.baseline_world_size}[/][dim], (tps(N)/N)/(tps(N0)/N0)[/]"
        )
