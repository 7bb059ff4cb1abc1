"""actormesh.rpc across hosts: workers in different network namespaces form one group.

Each worker is a shell-started process (``rpc_shell_worker.py``, as torchrun would start
one per node) in its own namespace; they meet at rank 0's address, by ``env://``
(``MASTER_ADDR``/``MASTER_PORT``) and by a ``tcp://`` init method.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from multihost_support import Network

pytestmark = pytest.mark.timeout(240)

WORKER = Path(__file__).resolve().parents[1] / "rpc" / "rpc_shell_worker.py"


def _run_group(network: Network, env: dict[str, str], *extra: str) -> list[str]:
    workers = []
    for rank, host in enumerate(network.hosts):
        command = [
            "ip", "netns", "exec", host.netns,
            sys.executable, str(WORKER), f"w{rank}", str(rank), str(len(network.hosts)), *extra,
        ]  # fmt: skip
        workers.append(
            subprocess.Popen(
                command,
                env={**os.environ, **env},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=180)
        assert worker.returncode == 0, err
        outputs.append(out)
    return outputs


@pytest.mark.parametrize("init", ["env", "tcp"])
def test_an_rpc_group_spans_three_hosts(network: Network, init: str) -> None:
    master = network.hosts[0].ip
    if init == "env":
        outputs = _run_group(network, {"MASTER_ADDR": master, "MASTER_PORT": "29511"})
    else:
        outputs = _run_group(network, {}, f"tcp://{master}:29512")
    lines = outputs[0].splitlines()
    assert lines == ["w1 saw [1.0, 1.0]", "w2 saw [2.0, 2.0]", "w0 done"]
    assert outputs[1].strip() == "w1 done" and outputs[2].strip() == "w2 done"
