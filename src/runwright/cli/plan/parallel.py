"""`runwright plan parallel`: enumerate (dp, tp, pp) layouts, reject what cannot run (with why)
and rank the rest by estimated step time."""

from typing import Annotated

import typer
from rich.table import Table

from runwright.cli.plan.inputs import (
    BuffersGibOpt,
    DffOpt,
    DModelOpt,
    HeadroomOpt,
    HeadsOpt,
    JsonOpt,
    LayersOpt,
    MemoryGibOpt,
    MicroOpt,
    RecomputeOpt,
    SeqOpt,
    SpecOpt,
    SpOpt,
    VocabOpt,
    ZeroOpt,
    as_int,
    gib_to_bytes,
    model_from,
    optional_spec,
    pick,
    validated,
)
from runwright.cli.render import console, guarded, print_json
from runwright.plan import (
    Cluster,
    Link,
    ParallelSearch,
    PlanError,
    Recompute,
    Workload,
    ZeroStage,
    search_layouts,
)
from runwright.plan.base import GIB


def render_layouts(result: ParallelSearch, title: str, top: int) -> None:
    """The fastest `top` accepted layouts, then every rejected one with its reasons."""
    table = Table(title=title)
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
    buffers_gib: BuffersGibOpt = 0.0,
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
    spec = optional_spec(spec_file)
    model = model_from(spec, layers, d_model, heads, d_ff, vocab)
    res = spec.resources if spec else None
    per_node = pick(devices_per_node, res.devices_per_node if res else None, 8)
    world = pick(world_size, res.world_size if res else None)
    capacity = pick(gib_to_bytes(device_memory_gib), res.device_memory_bytes if res else None)
    # --peak-tflops is in TFLOP/s, the spec's peak in FLOP/s: 1 TFLOP/s = 1e12 FLOP/s.
    peak = pick(
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
    gbs = pick(global_batch_samples, as_int(spec.plan.global_batch_samples.value) if spec else None)
    if gbs is None:
        missing.append("--global-batch-samples")
    if missing:
        raise PlanError(
            f"give {', '.join(missing)} (or a --spec whose resources and training "
            "sections declare them)"
        )
    links = {
        name: validated(
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
    cluster = validated(
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
    work = validated(
        lambda: Workload(
            model=model,
            sequence_length=pick(seq_len, spec.data.sequence_length if spec else None, 2048),
            global_batch_samples=gbs,
            micro_batch_size=pick(
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
    render_layouts(
        result,
        f"layouts for {world} devices, {model.parameter_count:,} parameters, "
        f"fastest estimated step first",
        top,
    )
