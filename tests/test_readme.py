"""The README's examples work as written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from libra_astra.cli import main
from libra_astra.demand.types import demand_from_dict

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_demand_example_loads_and_optimizes(tmp_path):
    block = re.search(r"```json\n(.*?)```", README, re.S).group(1)
    d = demand_from_dict(json.loads(block), "README")
    assert d.npus_per_dim == (16, 8, 32) and len(d.rank_classes[0].collectives) == 2
    p = tmp_path / "d.json"
    p.write_text(block)
    r = CliRunner().invoke(main, ["optimize", "--demand", str(p), "--network", str(ROOT / "network_configs/paper_3d.yml"),
                                  "--cost", str(ROOT / "network_configs/cost.yml"), "--total-bw", "500", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["relative_gap"] <= 1e-6 and sum(out["optimum"]["bandwidth_gbps"]) == pytest.approx(500)


def test_quick_start_command_runs():
    line = next(l for l in README.splitlines() if l.startswith("pip install") and "libra-astra optimize" in l)
    args = line.split("&& libra-astra ", 1)[1].split()
    r = CliRunner().invoke(main, [a if not a.startswith(("traces/", "network_configs/")) else str(ROOT / a)
                                  for a in args])
    assert r.exit_code == 0, r.output
    assert "optimal" in r.output and "EqualBW" in r.output
