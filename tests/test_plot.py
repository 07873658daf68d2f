"""Pictures: the files are made, in the asked format, and hold every series with the right values.

The SVG is parsed: each bar is a <g id="series:..."> whose path's height is compared with the value
it draws (bars of one axes share a scale, so height ratios equal value ratios)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("matplotlib", reason="pictures need the plot extra: pip install -e '.[test,plot]'")

from libra_astra import plot  # noqa: E402
from libra_astra.astra.parse import parse_output  # noqa: E402
from libra_astra.cli import main  # noqa: E402
from libra_astra.demand.types import demand_to_dict, make_collective, single_class  # noqa: E402
from libra_astra.errors import LibraError  # noqa: E402
from libra_astra.model.network import network_from_dict  # noqa: E402
from libra_astra.timing.predict import predict  # noqa: E402
from libra_astra.optimize.report import traffic_by_type  # noqa: E402
from libra_astra.timing.model import simulator_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "astra"
SVG = "{http://www.w3.org/2000/svg}"


def series(svg_path: Path, widths: bool = False) -> dict[str, float]:
    """id -> height (or width; for lines, the number of points) of every element with a series id."""
    out = {}
    for g in ET.parse(svg_path).iter(f"{SVG}g"):
        gid = g.get("id", "")
        if not gid.startswith("series:"):
            continue
        path = g.find(f"{SVG}path")
        nums = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", path.get("d"))]
        ys = nums[1::2] if not widths else nums[0::2]
        out[gid] = max(ys) - min(ys) if "frontier" not in gid else len(ys)
    return out


def texts(svg_path: Path) -> str:
    return " ".join(t.text or "" for t in ET.parse(svg_path).iter(f"{SVG}text"))


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    r = CliRunner().invoke(main, ["optimize", str(ROOT / "traces/dlrm_16/dlrm"), "--network",
                                  str(ROOT / "network_configs/sample_4x4.yml"), "--cost",
                                  str(ROOT / "network_configs/cost.yml"), "--total-bw", "300", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_result_svg_has_bandwidth_and_breakdown_of_every_design(result, tmp_path):
    out = plot.plot_result(result, tmp_path / "r.svg", subtitle="the subtitle")
    s = series(out)
    designs = ["optimum", "EqualBW", "TrafficProportional"]
    dims = result["dimensions"]
    bw = {"optimum": result["optimum"]["bandwidth_gbps"],
          **{k: v["bandwidth_gbps"] for k, v in result["baselines"].items()}}
    ref = s["series:bandwidth:optimum:" + dims[0]] / bw["optimum"][0]
    for name in designs:
        for j, dim in enumerate(dims):
            assert s[f"series:bandwidth:{name}:{dim}"] == pytest.approx(ref * bw[name][j], rel=1e-3)
            assert f"series:time:{dim}:{name}" in s
        assert f"series:time:compute:{name}" in s
    # Horizontal time bars: widths proportional to compute and to each dimension's exposed communication.
    w = series(out, widths=True)
    unit = w["series:time:compute:optimum"] / result["breakdown"]["optimum"]["compute_ns"]
    for name in designs:
        b = result["breakdown"][name]
        assert w[f"series:time:compute:{name}"] == pytest.approx(unit * b["compute_ns"], rel=1e-6)
        for j, dim in enumerate(dims):
            assert w[f"series:time:{dim}:{name}"] == pytest.approx(unit * b["exposed_communication_ns"][j],
                                                                   rel=1e-4, abs=1e-3)
    words = texts(out)
    for w in ["compute", *[f"communication {d}" for d in dims], "the subtitle", "GB/s per NPU", *designs]:
        assert w in words


def test_breakdown_adds_up_to_the_time(result):
    for name, b in result["breakdown"].items():
        ev = result["optimum"] if name == "optimum" else result["baselines"][name]
        assert b["compute_ns"] + sum(b["exposed_communication_ns"]) == pytest.approx(ev["time_ns"], rel=1e-9)
        assert all(x >= 0 for x in b["exposed_communication_ns"])


def test_png_is_a_png(result, tmp_path):
    out = plot.plot_result(result, tmp_path / "r.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 1000 and height > 400


def test_traffic_by_collective_type(tmp_path):
    net = network_from_dict({"name": "t", "dimensions": [
        {"name": "a", "topology": "Ring", "npus": 4, "latency_ns": 1},
        {"name": "b", "topology": "Switch", "npus": 2, "latency_ns": 1}]})
    colls = [make_collective("ALL_REDUCE", 8e6, (4, 2), net=net), make_collective("ALL_TO_ALL", 2e6, (4, 1), net=net)]
    d = single_class("mix", (4, 2), 1e6, colls)
    by_type = traffic_by_type(d)
    assert by_type["ALL_REDUCE"] == pytest.approx([2 * 8e6 * 3 / 4, 2 * 2e6 * 1 / 2])   # 2m(p-1)/p, m/p on dim b
    assert by_type["ALL_TO_ALL"] == pytest.approx([2e6 * 3 / 4, 0.0])
    out = plot.plot_traffic(by_type, ["a", "b"], tmp_path / "t.svg")
    s = series(out)
    unit = s["series:traffic:ALL_REDUCE:a"] / by_type["ALL_REDUCE"][0]
    for kind, vals in by_type.items():
        for dim, v in zip("ab", vals):
            assert s[f"series:traffic:{kind}:{dim}"] == pytest.approx(unit * v, rel=1e-3, abs=1e-6)


def test_demand_picture_names_the_dimensions(tmp_path):
    """`plot` of a demand file labels its dimensions by the names the file records (by index without)."""
    net = network_from_dict({"name": "t", "dimensions": [
        {"name": "chip", "topology": "Ring", "npus": 4, "latency_ns": 1},
        {"name": "rack", "topology": "Switch", "npus": 2, "latency_ns": 1}]})
    d = single_class("ar", (4, 2), 1e6, [make_collective("ALL_REDUCE", 8e6, (4, 2), net=net)], net.dim_names)
    data = demand_to_dict(d)
    for names, labels in ((True, ["chip (4)", "rack (2)"]), (False, ["dim0 (4)", "dim1 (2)"])):
        if not names:
            del data["dim_names"]
        (tmp_path / "d.json").write_text(json.dumps(data))
        out = tmp_path / f"d{names}.svg"
        r = CliRunner().invoke(main, ["plot", str(tmp_path / "d.json"), "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert sorted(series(out)) == [f"series:traffic:ALL_REDUCE:{label}" for label in labels]
        assert all(label in texts(out) for label in labels)


def test_frontier_lines(tmp_path):
    pts = [{"budget_usd": b, "cost_usd": b, "time_ns": 1e9 / b, "bandwidth_gbps": [b / 1e3, b / 2e3],
            "relative_gap": 1e-10} for b in (1e5, 2e5, 4e5, 8e5)]
    out = plot.plot_frontier({"format": "libra_astra.pareto", "dimensions": ["x", "y"], "points": pts},
                             tmp_path / "f.svg")
    s = series(out)
    assert s["series:frontier"] == 4
    assert s["series:frontier-bandwidth:x"] == 4 and s["series:frontier-bandwidth:y"] == 4


def test_loop_predicted_vs_simulated(tmp_path):
    # Two recorded real runs (tests/fixtures/astra) against libra_astra's prediction for them.
    net = network_from_dict({"name": "r8", "dimensions": [
        {"name": "ring", "topology": "Ring", "npus": 8, "latency_ns": 0}]})
    bw = (100 * 2**30 / 1e9,)
    d = single_class("ar", (8,), 0.0, [make_collective("ALL_REDUCE", 2**30, (8,), net=net)])
    pred = predict(d, bw, net, simulator_model(1, 1e9)).time_ns
    rows = []
    for i, name in enumerate(["real_ring8_allreduce", "real_ring8_overlap"]):
        sim = parse_output((FIXTURES / f"{name}.stdout").read_text()).simulated_time_ns
        rows.append({"iteration": i, "name": name, "bandwidth_gbps": list(bw), "cost_usd": 1.0,
                     "predicted_ns": pred, "simulated_ns": sim, "relative_error": pred / sim - 1, "run_dirs": []})
    out = plot.plot_loop({"format": "libra_astra.loop", "dimensions": ["ring"], "rows": rows}, tmp_path / "l.svg")
    s = series(out)
    # The axis may start above 0, but each bar's path keeps its full height (clipped when drawn).
    unit = s["series:simulated:0:real_ring8_allreduce"] / rows[0]["simulated_ns"]
    for r in rows:
        for key in ("predicted", "simulated"):
            assert s[f"series:{key}:{r['iteration']}:{r['name']}"] == pytest.approx(unit * r[f"{key}_ns"], rel=1e-6)
    assert f"{100 * rows[0]['relative_error']:+.4f}%" in texts(out)


@pytest.mark.parametrize("name, message", [
    ("x.pdf", "x.pdf: picture format '.pdf' is not supported; name the file .svg or .png"),
    ("x", "x: picture format '(none)' is not supported; name the file .svg or .png"),
])
def test_unknown_format_refused(tmp_path, monkeypatch, name, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LibraError) as e:
        plot.check_output(name, False)
    assert str(e.value) == message


def test_existing_picture_kept_without_force(result, tmp_path):
    p = tmp_path / "r.svg"
    p.write_text("keep")
    with pytest.raises(LibraError, match="already exists; choose another path or pass --force"):
        plot.plot_result(result, p)
    assert p.read_text() == "keep"
    plot.plot_result(result, p, overwrite=True)
    assert p.read_text().startswith("<?xml")
