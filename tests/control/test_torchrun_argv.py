"""The torchrun command line of one node: standalone for one node, c10d for several."""

import subprocess
import sys
from pathlib import Path

import pytest

from runwright.control.executors.torchrun import Rendezvous, torchrun_argv
from runwright.errors import LaunchError
from runwright.spec import spec_from_mapping


def _spec(entrypoint: str = "module:runwright.demo.skeleton_worker", nodes: int = 1):
    return spec_from_mapping(
        {
            "name": "argv",
            "code": {"entrypoint": entrypoint, "args": ["--x", "1"]},
            "training": {"steps": 1, "global_batch_samples": 4},
            "resources": {"nodes": nodes, "devices_per_node": 2},
        },
        "test",
    )


def _option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_one_node_is_standalone(tmp_path):
    argv = torchrun_argv(_spec(), tmp_path, log_dir=tmp_path / "logs")
    assert "--standalone" in argv and _option(argv, "--nnodes") == "1"
    assert "--rdzv-backend" not in argv
    assert _option(argv, "--nproc-per-node") == "2"
    assert _option(argv, "--max-restarts") == "0"
    assert argv[-4:] == ["-m", "runwright.demo.skeleton_worker", "--x", "1"]


def test_several_nodes_meet_through_c10d_named_by_generation(tmp_path):
    rdzv = Rendezvous(endpoint="node1:29400", run_id="r-1", generation=3, nodes=2)
    host = torchrun_argv(_spec(nodes=2), tmp_path, log_dir=tmp_path, rendezvous=rdzv)
    peer = torchrun_argv(
        _spec(nodes=2), tmp_path, log_dir=tmp_path, rendezvous=rdzv, hosts_rendezvous=False
    )
    assert "--standalone" not in host
    assert _option(host, "--rdzv-backend") == "c10d"
    assert _option(host, "--rdzv-endpoint") == "node1:29400"
    assert _option(host, "--rdzv-id") == "r-1-g3"
    assert _option(host, "--nnodes") == "2"
    assert _option(host, "--rdzv-conf").startswith("is_host=1,")
    assert _option(peer, "--rdzv-conf").startswith("is_host=0,")


def test_a_missing_script_is_a_launch_error_naming_it(tmp_path):
    with pytest.raises(LaunchError, match=r"missing\.py"):
        torchrun_argv(_spec("missing.py"), tmp_path, log_dir=tmp_path)


def test_torchrun_accepts_the_options(tmp_path):
    """The options and the rendezvous configuration keys are torchrun's own: its parser and the
    c10d backend's parameter names, checked against the installed torch."""
    rdzv = Rendezvous(endpoint="127.0.0.1:1", run_id="r", generation=1, nodes=2)
    argv = torchrun_argv(_spec(nodes=2), tmp_path, log_dir=tmp_path, rendezvous=rdzv)
    code = (
        "import sys; from torch.distributed.run import get_args_parser; "
        "a = get_args_parser().parse_args(sys.argv[1:]); "
        "keys = dict(kv.split('=') for kv in a.rdzv_conf.split(',')); "
        "assert set(keys) <= {'is_host', 'join_timeout'}, keys; print(a.rdzv_backend)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv[3:]], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "c10d"
    assert Path(argv[0]).name.startswith("python")
