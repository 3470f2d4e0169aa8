"""Inventories of machines runwright can see for itself: this host, and a user's YAML file.

This host: CPU count and memory from the OS; NVIDIA GPUs from `nvidia-smi` when it is on PATH
(one subprocess, no torch), else from torch only when the process has already imported it (a
scheduler pass must never pay torch's seconds-long import), else the count the driver lists in
/proc/driver/nvidia/gpus (model name, no memory). Without GPUs the host is a CPU node whose
devices are its cores: the local executor runs one worker process per device.

The YAML file describes a user's own machines:

```yaml
fast_interconnect: NVLink          # what pending reasons call a fast domain (optional)
nodes:
  - name: gpu01
    device_type: H100
    device_count: 8
    device_memory_bytes: 80GiB     # an integer, or a size with a unit (KiB..TiB, KB..TB)
    host_memory_bytes: 2TiB
    cpus: 224
    pools: [default]
    labels: {fast_domain: island-a, rack: r1, network_domain: ib-0,
             versions: {driver: "550.54", cuda: "12.4"}}
    health: {state: drained, reason: "fan replaced, burn-in pending"}
quotas:                            # optional; a pool no quota names is unmetered
  - {project: vision, pool: default, devices: 64}
  - {project: speech, pool: default, devices: 32, borrowing_limit_devices: 16}
node_health:                       # optional; the controller's drain thresholds (defaults shown)
  {uncorrected_ecc_errors: 1, corrected_ecc_errors: 10000, hardware_xids: 1,
   window_seconds: 86400}
```

`quotas` are Kueue's nominal quotas (sched/quota.py): in a pool with quotas, a project holds up
to its quota on its own and borrows idle quota above it only for preemptible runs. `nodes: slurm`
instead of a list takes the nodes of the pools file's Slurm pools from the cluster, live (with
what other jobs hold there), and keeps the file's quotas.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from runwright.errors import RunwrightError
from runwright.sched.inventory import Inventory, Node
from runwright.sched.requests import Quotas

LIVE_NODES = ("slurm",)
"""What `nodes:` may name instead of a list: a cluster whose nodes the controller reads live."""
MAX_INVENTORY_FILE_BYTES = 10_000_000
"""A 10,000-node file is about 3 MB; a larger one is a wrong path."""

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_BYTE_FIELDS = ("device_memory_bytes", "host_memory_bytes")


class InventoryError(RunwrightError):
    """An inventory file (or a cluster's answer) cannot be read as nodes; the message names the
    file, the node and the field, and what to write instead."""


def parse_bytes(value: Any, where: str) -> int:
    """`value` (an int, or `80GiB`, `1.5 TB`) in bytes; InventoryError naming `where`."""
    if isinstance(value, bool):
        raise InventoryError(f"{where}: {value!r} is not a size; write bytes or e.g. 80GiB")
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if match is None or match.group(2).lower() not in _UNITS:
        raise InventoryError(
            f"{where}: {value!r} is not a size; write a whole number of bytes or a number with "
            f"one of the units {', '.join(u for u in _UNITS if u not in ('', 'b'))} "
            "(case-insensitive), e.g. 80GiB"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def load_inventory(path: Path) -> Inventory:
    """The inventory a YAML file describes; InventoryError naming the field and the fix."""
    nodes, _ = load_scheduler_file(path)
    if not isinstance(nodes, Inventory):
        raise InventoryError(f"inventory file {path} lists no nodes (`nodes: {nodes}`)")
    return nodes


def load_scheduler_file(path: Path) -> tuple[Inventory | str, Quotas]:
    """The nodes and the project quotas a YAML file describes; InventoryError naming the field
    and the fix. `nodes: slurm` (LIVE_NODES) instead of a list: the nodes are the Slurm pools'
    own, read live from the cluster by the controller (control/cluster_inventory.py)."""
    try:
        if path.stat().st_size > MAX_INVENTORY_FILE_BYTES:
            raise InventoryError(f"inventory file {path} is over {MAX_INVENTORY_FILE_BYTES:,} B")
        raw: Any = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise InventoryError(f"cannot read inventory file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise InventoryError(f"inventory file {path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict) or not (
        isinstance(raw.get("nodes"), list) or raw.get("nodes") in LIVE_NODES
    ):
        raise InventoryError(
            f"inventory file {path} must be a mapping with `nodes:` a list of nodes, each with "
            "at least name, device_type and device_count (or `nodes: slurm` for the Slurm "
            "pools' nodes, read live)"
        )
    raw.pop("node_health", None)  # the controller's drain policy (control/node_health.py)
    quotas = raw.pop("quotas", None) or []
    if not isinstance(quotas, list):
        raise InventoryError(
            f"inventory file {path}: quotas must be a list of {{project, pool, devices}} entries"
        )
    try:
        metered = Quotas.model_validate({"projects": quotas})
    except ValidationError as exc:
        raise InventoryError(f"inventory file {path}: {_quota_problems(exc, quotas)}") from None
    if raw["nodes"] in LIVE_NODES:
        return raw["nodes"], metered
    nodes = []
    for index, item in enumerate(raw["nodes"]):
        if not isinstance(item, dict):
            raise InventoryError(f"inventory file {path}: nodes[{index}] must be a mapping")
        label = f"inventory file {path}: nodes[{index}] ({item.get('name', 'no name')})"
        fields = dict(item)
        for name in _BYTE_FIELDS:
            if name in fields:
                fields[name] = parse_bytes(fields[name], f"{label}.{name}")
        nodes.append(fields)
    try:
        return Inventory.model_validate({**raw, "nodes": nodes}), metered
    except ValidationError as exc:
        raise InventoryError(f"inventory file {path}: {_problems(exc, raw['nodes'])}") from None


def _quota_problems(exc: ValidationError, quotas: list[Any]) -> str:
    """One line per error: the quota's index and project, and the field."""
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])[1:]  # under `projects`
        if loc and isinstance(loc[0], int):
            item = quotas[loc[0]] if loc[0] < len(quotas) else {}
            project = item.get("project", "no project") if isinstance(item, dict) else "?"
            where = f"quotas[{loc[0]}] ({project})" + "".join(f".{p}" for p in loc[1:])
        else:
            where = "quotas"
        hint = " (remove it; the fields are project, pool, devices, borrowing_limit_devices)"
        lines.append(f"{where}: {err['msg']}{hint if err['type'] == 'extra_forbidden' else ''}")
    return "; ".join(lines)


def _problems(exc: ValidationError, nodes: list[Any]) -> str:
    """One line per error: the node's name and the field, with pydantic's words."""
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        where = ".".join(str(p) for p in loc)
        if len(loc) >= 2 and loc[0] == "nodes" and isinstance(loc[1], int):
            name = nodes[loc[1]].get("name", "no name") if loc[1] < len(nodes) else "?"
            where = f"nodes[{loc[1]}] ({name}).{'.'.join(str(p) for p in loc[2:])}"
        hint = (
            " (remove it; see docs/sched.md for the fields)"
            if err["type"] == "extra_forbidden"
            else ""
        )
        lines.append(f"{where}: {err['msg']}{hint}")
    return "; ".join(lines)


def this_host(pools: tuple[str, ...] = ("default",)) -> Inventory:
    """This machine as a one-node inventory (see the module's docstring for where each figure
    comes from)."""
    cpus = os.cpu_count() or 1
    host_memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    gpus = _nvidia_smi() or _torch_gpus() or _driver_gpus()
    if gpus:
        device_type, device_memory_bytes = gpus[0]
        count = sum(1 for gpu in gpus if gpu == gpus[0])  # a mixed host offers its first kind
    else:
        device_type, device_memory_bytes, count = "cpu", 0, cpus
    node = Node(
        name=socket.gethostname(),
        device_type=device_type,
        device_count=count,
        device_memory_bytes=device_memory_bytes,
        host_memory_bytes=host_memory_bytes,
        cpus=cpus,
        pools=pools,
    )
    return Inventory(nodes=(node,))


def _nvidia_smi() -> list[tuple[str, int]]:
    """(model, memory bytes) per GPU from nvidia-smi; [] without it or on any failure."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return []
    try:
        out = subprocess.run(
            [program, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        name, _, mib = line.rpartition(",")
        if name and mib.strip().isdigit():
            found.append((_model(name), int(mib.strip()) * 2**20))  # nvidia-smi reports MiB
    return found


def _torch_gpus() -> list[tuple[str, int]]:
    """GPUs through torch, only when this process already imported it (never imports it)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return []
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    return [(_model(p.name), int(p.total_memory)) for p in props]


def _driver_gpus() -> list[tuple[str, int]]:
    """GPUs the NVIDIA driver lists, with their model and unknown (0) memory."""
    folder = Path("/proc/driver/nvidia/gpus")
    if not folder.is_dir():
        return []
    found = []
    for gpu in sorted(folder.iterdir()):
        try:
            info = (gpu / "information").read_text()
        except OSError:
            info = ""
        model = re.search(r"^Model:\s*(.+)$", info, re.MULTILINE)
        found.append((_model(model.group(1)) if model else "cuda", 0))
    return found


def _model(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `H100-80GB-HBM3`: the vendor dropped, spaces joined."""
    words = name.strip().removeprefix("NVIDIA").split()
    return "-".join(words) or "cuda"
