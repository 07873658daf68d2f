"""Fixtures shared by several test modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "astra"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A stand-in simulator: checks its inputs exist, prints a recorded stdout/stderr, exits with a code."""
    exe = tmp_path / "fake_astra"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, time\n"
        "args = dict(a[2:].split('=', 1) for a in sys.argv[1:])\n"
        "assert os.path.isfile(args['workload-configuration'] + '.0.et'), 'no workload'\n"
        "assert os.path.isdir(os.path.dirname(args['logging-folder'])), 'no logging parent'\n"
        "time.sleep(float(os.environ.get('FAKE_SLEEP', '0')))\n"
        "sys.stdout.write(open(os.environ['FAKE_STDOUT']).read())\n"
        "err = os.environ.get('FAKE_STDERR')\n"
        "sys.stderr.write(open(err).read() if err else '')\n"
        "sys.exit(int(os.environ.get('FAKE_CODE', '0')))\n")
    exe.chmod(0o755)

    def use(stdout: str, code: int = 0, stderr: str | None = None, sleep: float = 0.0) -> str:
        monkeypatch.setenv("FAKE_STDOUT", str(FIXTURES / stdout))
        monkeypatch.setenv("FAKE_CODE", str(code))
        monkeypatch.setenv("FAKE_SLEEP", str(sleep))
        if stderr:
            monkeypatch.setenv("FAKE_STDERR", str(FIXTURES / stderr))
        return str(exe)
    return use


@pytest.fixture
def ring4_switch4_allreduce(tmp_path):
    """(network, directory): Ring 4 x Switch 4 in net.yml and a one-class demand ar.json holding one
    1 GiB all-reduce over all 16 NPUs and 100 us of compute: the workload of the recorded
    real_ring4_switch4_k4 outputs."""
    import json

    from libra_astra.demand.types import demand_to_dict, make_collective, single_class
    from libra_astra.model.network import dump_network, network_from_dict

    net = network_from_dict({"name": "r4s4", "dimensions": [
        {"name": "ring", "topology": "Ring", "npus": 4, "latency_ns": 500, "cost_class": "InterPackage"},
        {"name": "switch", "topology": "Switch", "npus": 4, "latency_ns": 700, "cost_class": "InterPod"}]})
    (tmp_path / "net.yml").write_text(dump_network(net))
    demand = single_class("ar", net.npus_per_dim, 1e5, [make_collective("ALL_REDUCE", 2**30, (4, 4), net=net)])
    (tmp_path / "ar.json").write_text(json.dumps(demand_to_dict(demand)))
    return net, tmp_path


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """Collect garbage before the summary: a future that Dask's in-process cluster left behind on
    closing is reported when it is collected, and should come above pytest's closing line, not
    after it."""
    import gc
    gc.collect()
