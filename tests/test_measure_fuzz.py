"""Any damaged Kineto profile ends in LibraError (a one-line message) or a measurement, never another
exception: events of a small two-rank GPU step (an all-reduce that a kernel and a synchronizing call
wait for) with keys removed, values replaced by hostile ones, events dropped or duplicated."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from libra_astra.errors import LibraError
from libra_astra.measure.calibrate import calibrate
from libra_astra.measure.kineto import parse_profile
from libra_astra.measure.measurement import measure_profiles
from libra_astra.measure.replay import replay
from libra_astra.model.network import network_from_dict

from kineto_events import step_events

NET = network_from_dict({"name": "pair", "dimensions": [{"name": "a", "topology": "Ring", "npus": 2}]})
HOSTILE = st.one_of(st.none(), st.booleans(), st.integers(-5, 300), st.integers(2 ** 62, 2 ** 80),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.just({"a": 1}),
                    st.just([1, 2]), st.sampled_from(["kernel", "cuda_runtime", "cpu_op", "user_annotation", "X"]))


def _rank(rank: int, arrive: int, comm: int) -> dict:
    return {"distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
            "traceEvents": step_events(arrive, comm)}


# rank 0 arrives 30 us early and waits for rank 1: both all-reduces end at 180 us
BASE = [_rank(0, 100, 80), _rank(1, 130, 50)]
KEYS = st.sampled_from(["ph", "cat", "name", "tid", "ts", "dur", "args", "stream", "correlation", "Input Dims",
                        "Input type"])
EDIT = st.tuples(st.sampled_from(["set", "delete", "drop", "copy", "replace"]), st.integers(0, 1),
                 st.integers(0, 7), KEYS, HOSTILE)


def _apply(traces: list[dict], edit: tuple) -> None:
    what, rank, i, key, value = edit
    events = traces[rank]["traceEvents"]
    if not events:
        return
    i %= len(events)
    e = events[i]
    if what == "drop":
        del events[i]
    elif what == "copy":
        events.append(copy.deepcopy(e))
    elif what == "replace":
        events[i] = value
    elif isinstance(e, dict):
        where = e["args"] if key in ("stream", "correlation", "Input Dims", "Input type") \
            and isinstance(e.get("args"), dict) else e
        if what == "set":
            where[key] = value
        else:
            where.pop(key, None)


@settings(max_examples=400, deadline=None)
@given(st.lists(EDIT, min_size=1, max_size=4))
def test_damaged_profiles_end_in_one_line_errors(edits):
    traces = copy.deepcopy(BASE)
    for edit in edits:
        _apply(traces, edit)
    try:
        profiles = [parse_profile(t, f"run.{r}.json", r) for r, t in enumerate(traces)]
        m = measure_profiles(profiles, [], NET, "run")
        replay(profiles, m.collectives, lambda c: c.transfer_ns, m.world_size, m.clock_offsets_ns)
        if m.collectives:
            calibrate(m, NET)
    except LibraError as e:
        assert "\n" not in str(e)


def test_the_undamaged_profiles_measure_and_replay():
    # the base the edits start from is a valid run: the fuzzing reaches the replay, not only the reader
    profiles = [parse_profile(t, f"run.{r}.json", r) for r, t in enumerate(BASE)]
    m = measure_profiles(profiles, [], NET, "run")
    steps = [r.step_ns for r in replay(profiles, m.collectives, lambda c: c.transfer_ns, 2, m.clock_offsets_ns)]
    assert steps == [r.step_ns for r in m.ranks] and len(m.collectives) == 1
