"""Scheduler benchmark (issue 13): one admission pass with 1,000 pending gangs, and a week of
arrivals on a 10,000-device inventory, each for gang-bestfit-v1 against the FIFO first-fit
baseline (fifo-firstfit-v1) on the same arrivals, in the same run.

    nice -n 10 .venv/bin/python benchmarks/scheduler.py              # a week, ~10 min on 2 cores
    nice -n 10 .venv/bin/python benchmarks/scheduler.py --days 1     # a quicker look

Inventory: `--nodes` (1,250) nodes of 8 H100 (10,000 devices); each node is one NVLink domain
(an HGX board), `--network-domains` (10) InfiniBand pods of 125 nodes, racks of 16.

Arrivals (seeded, `--seed`): Poisson at the rate that offers `--load` (0.9) of the capacity.
Gang sizes 1..1024 devices (most small, a few large: SIZES); gangs of 8 or more take whole nodes
with tp=8, and half of those of 64 or more ask for one network pod. Run lengths log-normal
(median 2 h, sigma 1, at most 2 days); a run's declared time limit (its expected duration) is
its length times U(1, 2), as users overestimate. Priority classes 0 / 1 / 2 (40 / 45 / 15 %);
class 0 is preemptible, class 1 is in 30 % of cases, class 2 never. Four projects with quotas of
40 / 30 / 20 / 10 % of the devices and demand shares of 25 / 30 / 25 / 20 %: two projects ask for
more than their quota, so borrowing matters.

Failures: each node fails with a mean time between failures of `--node-mtbf-days` (30) and is
repaired (drained, then healthy) after `--repair-hours` (6); 5 % of runs crash once at a uniform
point. A failed or preempted run loses the work since its last checkpoint (every 30 min) and is
requeued with the rest (its first start is what its wait time measures).

The simulation runs one admission pass every `--pass-seconds` (300) of simulated time when
anything changed. Reported per policy:
  utilisation       time-averaged devices held / devices on healthy nodes; `goodput` counts only
                    work that was kept (not lost to failures or preemption)
  wait (minutes)    submit to first start, p50 / p90 / p99 per priority class, over runs that
                    started (with the count of runs still waiting at the end)
  fairness          per project: quota share, demand share and share of device-hours run, and
                    Jain's index of (device-hours run / demanded) over projects (1 = every project
                    served in proportion to its demand)
  fragmentation     time-averaged over passes: share of free healthy devices not on a wholly free
                    node (they cannot host a whole-node gang)
  admission pass    wall milliseconds of each pass in the simulation (median, p99, max)

The 1,000-pending pass: the inventory 85 % held by running gangs (admitted by a pass), 1,000
pending gangs drawn from the same distribution; `admit` timed `--rounds` (7) times per policy,
the policies interleaved round by round; median, min and max.

Results: benchmarks/results/scheduler.json, and a rich table.
"""

import argparse
import heapq
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from runwright.sched.admission import POLICIES, admit  # noqa: E402
from runwright.sched.inventory import Inventory, Node, NodeHealth, NodeLabels  # noqa: E402
from runwright.sched.requests import (  # noqa: E402
    AdmissionInput,
    GangRequest,
    ProjectQuota,
    Quotas,
    RunningGang,
)

RESULTS = REPO / "benchmarks" / "results" / "scheduler.json"
SIZES = ((1, 20), (2, 10), (4, 10), (8, 20), (16, 12), (32, 10), (64, 8), (128, 5), (256, 3),
         (512, 1.5), (1024, 0.5))  # fmt: skip
"""(gang devices, weight in %)."""
PROJECTS = (("vision", 0.40, 0.25), ("nlp", 0.30, 0.30), ("speech", 0.20, 0.25),
            ("robotics", 0.10, 0.20))  # fmt: skip
"""(project, quota share, demand share)."""
PRIORITIES = ((0, 0.40, 1.0), (1, 0.45, 0.3), (2, 0.15, 0.0))
"""(class, share of runs, share preemptible)."""
CHECKPOINT_SECONDS = 1800.0
HOUR = 3600.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def jain(values: list[float]) -> float:
    """Jain's fairness index (Jain, Chiu, Hawe 1984): (sum x)^2 / (n sum x^2), 1 = all equal."""
    squares = sum(v * v for v in values)
    return sum(values) ** 2 / (len(values) * squares) if squares else math.nan


def build_inventory(nodes: int, network_domains: int) -> Inventory:
    per_pod = math.ceil(nodes / network_domains)
    return Inventory(
        nodes=tuple(
            Node(
                name=f"gpu{i:05d}",
                device_type="H100",
                device_count=8,
                device_memory_bytes=80 * 2**30,
                labels=NodeLabels(rack=f"r{i // 16:04d}", network_domain=f"pod{i // per_pod:02d}"),
            )
            for i in range(nodes)
        )
    )


def quotas_for(devices: int) -> Quotas:
    return Quotas(
        projects=tuple(
            ProjectQuota(project=name, devices=round(devices * share))
            for name, share, _ in PROJECTS
        )
    )


@dataclass
class Job:
    run_id: str
    project: str
    priority: int
    preemptible: bool
    devices: int
    tp: int
    per_node: int | None
    same_pod: bool
    work_seconds: float
    """Work left to do."""
    demand_seconds: float
    """The run's whole length, as submitted (work_seconds shrinks as it runs)."""
    limit_factor: float
    submitted: float
    first_start: float | None = None
    started: float = 0.0
    crash_at_fraction: float | None = None

    def request(self) -> GangRequest:
        return GangRequest(
            run_id=self.run_id,
            project=self.project,
            priority=self.priority,
            submitted_at_seconds=self.submitted,
            devices=self.devices,
            devices_per_node=self.per_node,
            tp=self.tp,
            same_network_domain=self.same_pod,
            preemptible=self.preemptible,
            expected_duration_seconds=self.work_seconds * self.limit_factor,
        )


def draw_job(rng: random.Random, index: int, at: float) -> Job:
    size = rng.choices([s for s, _ in SIZES], [w for _, w in SIZES])[0]
    project = rng.choices([p for p, _, _ in PROJECTS], [d for _, _, d in PROJECTS])[0]
    priority, _, soft = rng.choices(PRIORITIES, [s for _, s, _ in PRIORITIES])[0]
    whole = size >= 8
    return Job(
        run_id=f"run{index:06d}",
        project=project,
        priority=priority,
        preemptible=rng.random() < soft,
        devices=size,
        tp=8 if whole else 1,
        per_node=8 if whole else None,
        same_pod=size >= 64 and rng.random() < 0.5,
        work_seconds=(length := min(2 * HOUR * math.exp(rng.gauss(0, 1)), 48 * HOUR)),
        demand_seconds=length,
        limit_factor=rng.uniform(1.0, 2.0),
        submitted=at,
        crash_at_fraction=rng.random() if rng.random() < 0.05 else None,
    )


def mean_device_seconds() -> float:
    """Expected devices x run length of one arrival (for the arrival rate)."""
    size = sum(s * w for s, w in SIZES) / sum(w for _, w in SIZES)
    length = 2 * HOUR * math.exp(0.5)  # log-normal mean, median 2 h, sigma 1 (cap ignored)
    return size * length


@dataclass
class Sim:
    policy: str
    inventory: Inventory
    quotas: Quotas
    pass_seconds: float
    health: dict[str, str] = field(default_factory=dict)
    pending: dict[str, Job] = field(default_factory=dict)
    running: dict[str, tuple[Job, RunningGang]] = field(default_factory=dict)
    finished: list[Job] = field(default_factory=list)
    pass_ms: list[float] = field(default_factory=list)
    pass_cpu_ms: list[float] = field(default_factory=list)
    fragmented_devices: list[int] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)
    busy_device_seconds: float = 0.0
    healthy_device_seconds: float = 0.0
    lost_device_seconds: float = 0.0
    used_by_project: dict[str, float] = field(default_factory=dict)
    preemptions: int = 0
    failures: int = 0
    held_by_project: dict[str, int] = field(default_factory=dict)
    """Devices each project holds now (kept as gangs start and stop, not summed per event)."""
    healthy_devices: int = 0
    current: Inventory | None = None
    """The inventory with today's node health: rebuilt only when a node fails or comes back,
    so passes in between reuse the scheduler's index of it (pass_state.InventoryIndex)."""

    def hold(self, job: "Job", devices: int) -> None:
        self.held_by_project[job.project] = self.held_by_project.get(job.project, 0) + devices


def simulate(args, policy: str, inventory: Inventory, arrivals: list[Job], node_events) -> dict:
    quotas = quotas_for(sum(n.device_count for n in inventory.nodes))
    sim = Sim(policy, inventory, quotas, args.pass_seconds)
    nodes = {n.name: n for n in inventory.nodes}
    events: list[tuple[float, int, str, object]] = []
    seq = 0

    def push(at: float, kind: str, payload: object) -> None:
        nonlocal seq
        heapq.heappush(events, (at, seq, kind, payload))
        seq += 1

    for job in arrivals:
        push(job.submitted, "arrive", job)
    for at, name, kind in node_events:
        push(at, kind, name)
    end = args.days * 24 * HOUR
    push(0.0, "pass", None)
    now, changed, last = 0.0, True, 0.0
    node_state = {name: "healthy" for name in nodes}

    sim.healthy_devices = sum(n.device_count for n in inventory.nodes)

    def stop(run_id: str, at: float, lost_work: bool) -> Job:
        job, _ = sim.running.pop(run_id)
        sim.hold(job, -job.devices)
        ran = at - job.started
        kept = ran - (ran % CHECKPOINT_SECONDS if lost_work else 0.0)
        sim.lost_device_seconds += (ran - kept) * job.devices
        job.work_seconds = max(job.work_seconds - kept, 60.0)
        return job

    while events:
        at, _, kind, payload = heapq.heappop(events)
        if at > end:
            break
        for project, devices in sim.held_by_project.items():
            sim.used_by_project[project] = sim.used_by_project.get(project, 0.0) + devices * (
                at - last
            )
        sim.busy_device_seconds += sum(sim.held_by_project.values()) * (at - last)
        sim.healthy_device_seconds += sim.healthy_devices * (at - last)
        now, last = at, at
        if kind == "arrive":
            job = payload
            sim.pending[job.run_id] = job
            changed = True
        elif kind == "finish":
            run_id, started = payload
            if run_id in sim.running and sim.running[run_id][0].started == started:
                job = stop(run_id, now, lost_work=False)
                sim.finished.append(job)
                changed = True
        elif kind == "crash":
            run_id, started = payload
            if run_id in sim.running and sim.running[run_id][0].started == started:
                job = stop(run_id, now, lost_work=True)
                job.crash_at_fraction = None
                sim.failures += 1
                sim.pending[run_id] = job
                changed = True
        elif kind in ("fail", "repair"):
            node_state[payload] = "unhealthy" if kind == "fail" else "healthy"
            sim.healthy_devices += nodes[payload].device_count * (-1 if kind == "fail" else 1)
            sim.current = None
            if kind == "fail":
                for run_id, (_, gang) in list(sim.running.items()):
                    if any(s.node == payload for s in gang.placement):
                        sim.pending[run_id] = stop(run_id, now, lost_work=True)
                        sim.failures += 1
            changed = True
        elif kind == "pass":
            if changed:
                changed = False
                run_pass(sim, nodes, node_state, now, push)
            push(now + args.pass_seconds, "pass", None)
    return report(sim, end, arrivals)


def run_pass(sim: Sim, nodes, node_state, now: float, push) -> None:
    if sim.current is None:
        sim.current = Inventory(
            nodes=tuple(
                n if node_state[n.name] == "healthy" else
                n.model_copy(update={"health": NodeHealth(state="unhealthy", reason="failed")})
                for n in sim.inventory.nodes
            )
        )  # fmt: skip
    inventory = sim.current
    state = AdmissionInput(
        now_seconds=now,
        pending=tuple(job.request() for job in sim.pending.values()),
        running=tuple(gang for _, gang in sim.running.values()),
        quotas=sim.quotas,
    )
    started, started_cpu = time.perf_counter(), time.process_time()
    result = admit(inventory, state, sim.policy)
    sim.pass_ms.append((time.perf_counter() - started) * 1000)
    sim.pass_cpu_ms.append((time.process_time() - started_cpu) * 1000)
    for decision in result.decisions:
        if decision.outcome != "admit":
            continue
        for victim in decision.preempt:
            job, gang = sim.running.pop(victim)
            sim.hold(job, -job.devices)
            ran = now - job.started
            kept = ran - ran % CHECKPOINT_SECONDS  # stops at a step boundary after a save
            sim.lost_device_seconds += (ran - kept) * job.devices
            job.work_seconds = max(job.work_seconds - kept, 60.0)
            sim.pending[victim] = job
            sim.preemptions += 1
        job = sim.pending.pop(decision.run_id)
        job.started = now
        if job.first_start is None:
            job.first_start = now
        gang = RunningGang.admitted(
            job.request(),
            decision.placement,
            decision.borrowed,
            now + job.work_seconds * job.limit_factor,
        )
        sim.running[job.run_id] = (job, gang)
        sim.hold(job, job.devices)
        if job.crash_at_fraction is not None:
            push(now + job.work_seconds * job.crash_at_fraction, "crash", (job.run_id, now))
        else:
            push(now + job.work_seconds, "finish", (job.run_id, now))
    free = {n: nodes[n].device_count for n, s in node_state.items() if s == "healthy"}
    for _, gang in sim.running.values():
        for share in gang.placement:
            if share.node in free:
                free[share.node] -= len(share.devices)
    total_free = sum(free.values())
    whole = sum(v for n, v in free.items() if v == nodes[n].device_count)
    sim.fragmentation.append(1 - whole / total_free if total_free else 0.0)
    sim.fragmented_devices.append(total_free - whole)


def report(sim: Sim, end: float, arrivals: list[Job]) -> dict:
    waits: dict[int, list[float]] = {}
    waiting: dict[int, int] = {}
    for job in arrivals:
        if job.submitted > end:
            continue
        if job.first_start is None:
            waiting[job.priority] = waiting.get(job.priority, 0) + 1
        else:
            waits.setdefault(job.priority, []).append((job.first_start - job.submitted) / 60)
    demand: dict[str, float] = {}
    for job in arrivals:
        if job.submitted <= end:
            demand[job.project] = demand.get(job.project, 0.0) + job.devices * job.demand_seconds
    used_total = sum(sim.used_by_project.values()) or 1.0
    demand_total = sum(demand.values()) or 1.0
    projects = {
        name: {
            "quota_share": quota,
            "demand_share": demand.get(name, 0.0) / demand_total,
            "used_share": sim.used_by_project.get(name, 0.0) / used_total,
            "served_of_demand": sim.used_by_project.get(name, 0.0) / demand.get(name, 1.0),
        }
        for name, quota, _ in PROJECTS
    }
    healthy = sim.healthy_device_seconds or 1.0
    return {
        "policy": sim.policy,
        "utilisation": sim.busy_device_seconds / healthy,
        "goodput": (sim.busy_device_seconds - sim.lost_device_seconds) / healthy,
        "wait_minutes": {
            str(p): {
                "p50": percentile(waits.get(p, []), 50),
                "p90": percentile(waits.get(p, []), 90),
                "p99": percentile(waits.get(p, []), 99),
                "started": len(waits.get(p, [])),
                "still_waiting": waiting.get(p, 0),
            }
            for p, _, _ in PRIORITIES
        },
        "projects": projects,
        "jain_served_of_demand": jain([v["served_of_demand"] for v in projects.values()]),
        "fragmentation": statistics.fmean(sim.fragmentation) if sim.fragmentation else math.nan,
        "fragmented_devices": statistics.fmean(sim.fragmented_devices)
        if sim.fragmented_devices
        else math.nan,
        "pass_ms": {
            "count": len(sim.pass_ms),
            "p50": percentile(sim.pass_ms, 50),
            "p99": percentile(sim.pass_ms, 99),
            "max": max(sim.pass_ms, default=math.nan),
            "cpu_p50": percentile(sim.pass_cpu_ms, 50),
            "cpu_p99": percentile(sim.pass_cpu_ms, 99),
            "cpu_max": max(sim.pass_cpu_ms, default=math.nan),
        },
        "runs_finished": len(sim.finished),
        "preemptions": sim.preemptions,
        "failures": sim.failures,
    }


def thousand_pending(args, inventory: Inventory) -> dict:
    """The pass with 1,000 pending gangs on an 85 %-held inventory, per policy, interleaved."""
    rng = random.Random(args.seed + 1)
    quotas = quotas_for(sum(n.device_count for n in inventory.nodes))
    capacity = sum(n.device_count for n in inventory.nodes)
    fill, held, index = [], 0, 0
    while held < 0.85 * capacity:
        job = draw_job(rng, index, 0.0)
        job.preemptible = True  # so its borrowing is allowed: it fills the pool
        fill.append(job.request())
        held += job.devices
        index += 1
    first = admit(inventory, AdmissionInput(pending=tuple(fill), quotas=quotas))
    by_id = {r.run_id: r for r in fill}
    running = tuple(
        RunningGang.admitted(by_id[d.run_id], d.placement, d.borrowed, rng.uniform(60, 48 * HOUR))
        for d in first.decisions
        if d.outcome == "admit"
    )
    pending = tuple(draw_job(rng, index + i, float(i)).request() for i in range(args.pending))
    state = AdmissionInput(now_seconds=0.0, pending=pending, running=running, quotas=quotas)
    seconds: dict[str, list[float]] = {p: [] for p in POLICIES}
    cpu: dict[str, list[float]] = {p: [] for p in POLICIES}
    outcomes: dict[str, dict[str, int]] = {}
    for _ in range(args.rounds):
        for policy in POLICIES:
            started, started_cpu = time.perf_counter(), time.process_time()
            result = admit(inventory, state, policy)
            seconds[policy].append(time.perf_counter() - started)
            cpu[policy].append(time.process_time() - started_cpu)
            admitted = [d for d in result.decisions if d.outcome == "admit"]
            outcomes[policy] = {
                "admitted": len(admitted),
                "preempting": sum(1 for d in admitted if d.preempt),
                "pending": len(result.decisions) - len(admitted),
                "reservations": len(result.reservations),
            }
    held_devices = sum(g.devices for g in running)
    return {
        "pending": args.pending,
        "running_gangs": len(running),
        "held_devices": held_devices,
        "capacity_devices": capacity,
        "per_policy": {
            p: {
                "median_seconds": statistics.median(v),
                "min_seconds": min(v),
                "max_seconds": max(v),
                "median_cpu_seconds": statistics.median(cpu[p]),
                **outcomes[p],
            }
            for p, v in seconds.items()
        },
        "target_seconds": 1.0,
    }


def node_failures(args, inventory: Inventory, rng: random.Random) -> list[tuple[float, str, str]]:
    end = args.days * 24 * HOUR
    found = []
    for node in inventory.nodes:
        at = rng.expovariate(1 / (args.node_mtbf_days * 24 * HOUR))
        while at < end:
            found.append((at, node.name, "fail"))
            found.append((at + args.repair_hours * HOUR, node.name, "repair"))
            at += args.repair_hours * HOUR + rng.expovariate(1 / (args.node_mtbf_days * 24 * HOUR))
    return found


def show(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    one = results["pass_1000_pending"]
    held = f"{one['held_devices']:,} of {one['capacity_devices']:,} devices held"
    table = Table(title=f"One admission pass, {one['pending']} pending gangs, {held}")
    for column in ("policy", "median s", "min s", "max s", "median CPU s", "admitted",
                   "preempting", "target"):  # fmt: skip
        table.add_column(column)
    for policy, row in one["per_policy"].items():
        table.add_row(policy, f"{row['median_seconds']:.3f}", f"{row['min_seconds']:.3f}",
                      f"{row['max_seconds']:.3f}", f"{row['median_cpu_seconds']:.3f}",
                      str(row["admitted"]), str(row["preempting"]),
                      "under 1 s" if row["median_seconds"] < 1 else "NOT MET")  # fmt: skip
    console.print(table)
    config = results["config"]
    table = Table(
        title=f"{config['days']:g} simulated days, {config['devices']:,} devices, "
        f"{results['arrivals']:,} arrivals"
    )
    sims = results["simulation"]
    table.add_column("figure")
    for policy in sims:
        table.add_column(policy)
    rows = [
        ("utilisation", lambda s: f"{s['utilisation']:.1%}"),
        ("goodput (kept work)", lambda s: f"{s['goodput']:.1%}"),
        *(
            (f"wait p50/p90/p99 min, class {p}",
             lambda s, p=str(p): "{p50:.0f} / {p90:.0f} / {p99:.0f} ({still_waiting} waiting)"
             .format(**s["wait_minutes"][p]))
            for p, _, _ in PRIORITIES
        ),
        *(
            (f"project {name}: quota / demand / used",
             lambda s, n=name: "{quota_share:.0%} / {demand_share:.0%} / {used_share:.0%}"
             .format(**s["projects"][n]))
            for name, _, _ in PROJECTS
        ),
        ("Jain index of served/demand", lambda s: f"{s['jain_served_of_demand']:.3f}"),
        ("fragmentation (free, not whole nodes)",
         lambda s: f"{s['fragmentation']:.1%} ({s['fragmented_devices']:.0f} devices)"),
        ("pass ms p50 / p99 / max", lambda s: "{p50:.0f} / {p99:.0f} / {max:.0f}"
         .format(**s["pass_ms"])),
        ("pass CPU ms p50 / p99 / max", lambda s: "{cpu_p50:.0f} / {cpu_p99:.0f} / {cpu_max:.0f}"
         .format(**s["pass_ms"])),
        ("runs finished", lambda s: f"{s['runs_finished']:,}"),
        ("preemptions / failures", lambda s: f"{s['preemptions']:,} / {s['failures']:,}"),
    ]  # fmt: skip
    for name, cell in rows:
        table.add_row(name, *(cell(s) for s in sims.values()))
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--network-domains", type=int, default=10)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--pass-seconds", type=float, default=300.0)
    parser.add_argument("--node-mtbf-days", type=float, default=30.0)
    parser.add_argument("--repair-hours", type=float, default=6.0)
    parser.add_argument("--pending", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()

    inventory = build_inventory(args.nodes, args.network_domains)
    devices = sum(n.device_count for n in inventory.nodes)
    one = thousand_pending(args, inventory)
    rng = random.Random(args.seed)
    rate = args.load * devices / mean_device_seconds()  # arrivals per second
    arrivals, at = [], 0.0
    while True:
        at += rng.expovariate(rate)
        if at > args.days * 24 * HOUR:
            break
        arrivals.append(draw_job(rng, len(arrivals), at))
    failures = node_failures(args, inventory, rng)
    simulation = {}
    for policy in POLICIES:
        fresh = [Job(**{**job.__dict__}) for job in arrivals]
        started = time.perf_counter()
        simulation[policy] = simulate(args, policy, inventory, fresh, failures)
        simulation[policy]["simulation_wall_seconds"] = time.perf_counter() - started
    results = {
        "config": {
            **{k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "devices": devices,
        },
        "arrivals": len(arrivals),
        "pass_1000_pending": one,
        "simulation": simulation,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_1m": os.getloadavg()[0],
            "note": "a shared machine: other work ran beside this benchmark",
        },
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    show(results)
    print(f"results: {args.output}")


if __name__ == "__main__":
    main()
