"""The shared time-model settings (defaults, refusals, labels, emit's round trip) and the progress line."""

from __future__ import annotations

import io

import pytest

from libra_astra.errors import LibraError
from libra_astra.timing.settings import (DEFAULT_LOCAL_MEM_BW_GBPS, describe_settings, emit_settings, header,
                                model_from_settings, model_settings, resolve_model)
from libra_astra.cli.progress import Progress, enabled
from libra_astra.timing.model import TimeModel, simulator_model


def test_default_is_the_simulator_model_loop_checks():
    assert resolve_model() == simulator_model(1, DEFAULT_LOCAL_MEM_BW_GBPS, overlap=True)
    assert resolve_model("pipelined", 4, 500.0, False) == TimeModel("pipelined", 4, True, 500.0, None, False)


def test_libra_is_the_paper_model_without_overlap():
    assert resolve_model("libra") == TimeModel("libra", overlap=False)
    assert resolve_model("libra", overlap=True).overlap


@pytest.mark.parametrize("splits, mem, message", [
    (4, None, "--splits applies to --model pipelined only (the LIBRA model has no chunks, latency or local "
              "reduction cost); drop --splits or use --model pipelined"),
    (None, 100.0, "--local-mem-bw applies to --model pipelined only (the LIBRA model has no chunks, latency or "
                  "local reduction cost); drop --local-mem-bw or use --model pipelined"),
    (1, 100.0, "--splits and --local-mem-bw apply to --model pipelined only (the LIBRA model has no chunks, "
               "latency or local reduction cost); drop --splits and --local-mem-bw or use --model pipelined"),
])
def test_options_the_libra_model_ignores_are_refused(splits, mem, message):
    with pytest.raises(LibraError) as e:
        resolve_model("libra", splits, mem)
    assert str(e.value) == message


@pytest.mark.parametrize("model", [resolve_model(), resolve_model("libra"), resolve_model("pipelined", 8, 300.0, False),
                                   TimeModel("pipelined", 2, True, None, (0.9, 1.1), True)])
def test_settings_round_trip(model):
    assert model_from_settings(model_settings(model), "f") == model


def test_header_names_objective_model_chunks_latency_overlap():
    h = header("perf", model_settings(resolve_model()))
    assert h == ("objective perf | model pipelined (ASTRA-sim ring) | 1 chunk per collective | per-hop latency | "
                 "overlap on (dependency graph) | local-mem-bw 1e9 GB/s")
    h = header("perf-per-cost", model_settings(resolve_model("libra")))
    assert h == ("objective perf-per-cost | model libra (paper: max over dimensions of traffic/B) | chunks n/a | "
                 "no latency | overlap off (compute + communication)")
    assert "4 chunks per collective" in describe_settings(model_settings(resolve_model(splits=4)))


def test_emit_uses_the_designs_settings_and_refuses_others():
    s = model_settings(resolve_model(splits=4, local_mem_bw_gbps=800.0))
    assert emit_settings("d", s, None, None) == (4, 800.0, [])
    assert emit_settings("d", s, 4, 800.0) == (4, 800.0, [])
    with pytest.raises(LibraError) as e:
        emit_settings("d", s, 1, None)
    assert str(e.value) == ("design 'd' was optimized for 4 chunks per collective (pipelined model); emitting it "
                            "with --splits 1 would simulate another time model than the one optimized; drop "
                            "--splits, or optimize again with --splits 1")
    with pytest.raises(LibraError) as e:
        emit_settings("d", s, None, 1e9)
    assert str(e.value) == ("design 'd' was optimized with local-mem-bw 800 GB/s; emitting it with --local-mem-bw "
                            "1e9 would simulate another time model than the one optimized; drop --local-mem-bw, or "
                            "optimize again with --local-mem-bw 1e9")


def test_emit_of_a_libra_design_says_what_it_simulates():
    k, mem, notes = emit_settings("d", model_settings(resolve_model("libra")), 4, None)
    assert (k, mem) == (4, DEFAULT_LOCAL_MEM_BW_GBPS)
    assert notes == ["design optimized with the libra model, which the simulator does not compute; emitted with "
                     "4 chunks per collective, and predicted with the pipelined model for these settings"]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_only_on_a_terminal_and_not_quiet():
    assert not enabled(io.StringIO(), quiet=False)
    assert enabled(_Tty(), quiet=False)
    assert not enabled(_Tty(), quiet=True)


def test_progress_line_redraws_and_erases():
    now = [0.0]
    out = _Tty()
    p = Progress("reading traces", stream=out, on=True, interval_s=1.0, clock=lambda: now[0])
    p(1, 4)
    now[0] = 0.5
    p(2, 4)                           # within the interval: not drawn
    now[0] = 2.0
    p(3, 4)
    p(4, 4)                           # the last step is always drawn
    p.close()
    assert out.getvalue().split("\r")[1:] == [
        "reading traces: 1/4 (25%) 0 s", "reading traces: 3/4 (75%) 2 s", "reading traces: 4/4 (100%) 2 s",
        " " * len("reading traces: 4/4 (100%) 2 s"), ""]


def test_progress_off_writes_nothing():
    out = _Tty()
    with Progress("x", stream=out, on=False) as p:
        p(1, 2)
        p.note("stage")
    assert out.getvalue() == ""


def test_note_ticks_while_a_step_runs():
    import time as _time

    out = _Tty()
    p = Progress("loop", stream=out, on=True, tick_s=0.01)
    p.note("simulating")
    _time.sleep(0.1)
    p.close()
    parts = out.getvalue().split("\r")
    assert parts[1] == "loop: simulating"
    assert any(x.startswith("loop: simulating 0 s") for x in parts[2:])
    assert parts[-1] == ""


def test_the_command_line_starts_without_numerical_libraries():
    # --help and shell completion import only click and light modules (tools/bench_cli_start.py times it).
    import subprocess
    import sys

    code = ("import sys; from libra_astra.cli import main; "
            "main(['--help'], prog_name='libra-astra', standalone_mode=False); "
            "print(sorted(m for m in ('numpy', 'scipy', 'yaml', 'chakra', 'google.protobuf', 'matplotlib') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_objectives_listed_without_numpy_are_the_optimizers():
    from libra_astra.optimize.problem import OBJECTIVES as REAL
    from libra_astra.timing.settings import OBJECTIVES

    assert tuple(OBJECTIVES) == tuple(REAL)
