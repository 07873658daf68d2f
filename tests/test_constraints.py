"""Linear constraints written as text: what parses to what, and the message of every parse error."""

from pathlib import Path

import pytest

from libra_astra.optimize.constraints import LinearConstraint, load_constraints_file, parse_constraint, parse_constraints
from libra_astra.errors import LibraError
from libra_astra.model.network import load_network

NET = load_network(Path(__file__).resolve().parent.parent / "network_configs" / "paper_3d.yml")  # package, node, pod


@pytest.mark.parametrize("text, coeffs, op, rhs", [
    ("bw[0] >= bw[1]", (1, -1, 0), ">=", 0),
    ("bw[0] >= 2*bw[1]", (1, -2, 0), ">=", 0),
    ("bw[0] >= 0.5 * bw[1]", (1, -0.5, 0), ">=", 0),
    ("bw[2] + bw[1] == 200", (0, 1, 1), "==", 200),
    ("-bw[0] = -5", (-1, 0, 0), "==", -5),
    ("2*bw[pod] - bw[node] <= 10", (0, -1, 2), "<=", 10),
    ("bw[package] <= 1e2", (1, 0, 0), "<=", 100),
    ("bw[0] >= .5", (1, 0, 0), ">=", 0.5),
    ("2 * 3 <= bw[0]", (-1, 0, 0), "<=", -6),                 # numbers on both sides move right
    ("bw[0] + 10 <= bw[1] - 5", (1, -1, 0), "<=", -15),
    ("bw[0] * 3 + bw[0] >= 8", (4, 0, 0), ">=", 8),           # a number may follow bw[...]
    ("- - bw[1] >= 1", (0, 1, 0), ">=", 1),
    ("  bw [ 2 ]  <=  7  ", (0, 0, 1), "<=", 7),
])
def test_parse(text, coeffs, op, rhs):
    lc = parse_constraint(text, NET)
    assert lc.coeffs == pytest.approx(coeffs) and lc.op == op and lc.rhs == pytest.approx(rhs)
    assert lc.text == text.strip()


@pytest.mark.parametrize("text, message", [
    ("bw[node] > bw[pod]", "--constraint: constraint 'bw[node] > bw[pod]' is strict ('>'), which the optimizer "
                           "cannot represent; write 'bw[node] >= bw[pod]'"),
    ("bw[0] < 1e2", "--constraint: constraint 'bw[0] < 1e2' is strict ('<'), which the optimizer cannot represent; "
                    "write 'bw[0] <= 1e2'"),
    ("bw[0] ! 3", "--constraint: cannot read '! 3' in constraint 'bw[0] ! 3'; write e.g. 'bw[0] >= bw[1]' or "
                  "'bw[0] + bw[1] == 200'"),
    ("bw[0] >= bw[1] >= 2", "--constraint: constraint 'bw[0] >= bw[1] >= 2' needs exactly one of <=, >=, == (found 2)"),
    ("bw[0] + bw[1]", "--constraint: constraint 'bw[0] + bw[1]' needs exactly one of <=, >=, == (found 0)"),
    ("bw[0] >= 2 bw[1]", "--constraint: expected '+' or '-' before '1' in constraint 'bw[0] >= 2 bw[1]'"),
    (" >= bw[1]", "--constraint: constraint ' >= bw[1]' has an empty side"),
    ("bw[0] >= +", "--constraint: constraint 'bw[0] >= +' ends in an operator; complete the expression"),
    ("bw[0] <= 3 *", "--constraint: constraint 'bw[0] <= 3 *' ends in an operator; complete the expression"),
    ("bw[0] * bw[1] <= 3", "--constraint: constraint 'bw[0] * bw[1] <= 3' is not linear (bw times bw); only numbers "
                           "may multiply bw[...]"),
    ("* bw[0] <= 3", "--constraint: expected a number or bw[...] in constraint '* bw[0] <= 3', found '*'"),
    ("3 >= 1", "--constraint: constraint '3 >= 1' names no bandwidth; write e.g. 'bw[0] <= 100'"),
    ("bw[0] - bw[0] >= 1", "--constraint: constraint 'bw[0] - bw[0] >= 1' names no bandwidth; write e.g. 'bw[0] <= 100'"),
    ("bw[9] >= 1", "--constraint: constraint 'bw[9] >= 1': no dimension '9'; use an index 0..2 or one of ['package', 'node', 'pod']"),
    ("bw[rack] >= 1", "--constraint: constraint 'bw[rack] >= 1': no dimension 'rack'; use an index 0..2 or one of ['package', 'node', 'pod']"),
])
def test_parse_errors(text, message):
    with pytest.raises(LibraError) as e:
        parse_constraint(text, NET)
    assert str(e.value) == message


def test_satisfied_uses_a_relative_tolerance():
    lc = LinearConstraint((1.0, -2.0, 0.0), ">=", 0.0)
    assert lc.satisfied([200.0, 100.0, 0.0])
    assert lc.satisfied([200.0 - 1e-5, 100.0, 0.0])        # 1e-5 below, within 1e-6 of 400
    assert not lc.satisfied([199.0, 100.0, 0.0])
    eq = LinearConstraint((1.0, 1.0, 0.0), "==", 300.0)
    assert eq.satisfied([150.0, 150.0, 7.0]) and not eq.satisfied([150.0, 151.0, 0.0])
    le = LinearConstraint((0.0, 0.0, 1.0), "<=", 5.0)
    assert le.satisfied([9.0, 9.0, 5.0]) and not le.satisfied([0.0, 0.0, 5.1])


def test_constraints_file(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("# design rules\nbw[0] >= 2*bw[1]   # chiplet twice the package\n\n  bw[pod] <= 50\n")
    got = load_constraints_file(p, NET)
    assert [c.text for c in got] == ["bw[0] >= 2*bw[1]", "bw[pod] <= 50"]
    assert got == parse_constraints(["bw[0] >= 2*bw[1]", "bw[pod] <= 50"], NET)
    p.write_text("bw[0] >= 1\nbw[0] >> 2\n")
    with pytest.raises(LibraError) as e:
        load_constraints_file(p, NET)
    assert str(e.value).startswith(f"{p}:2: constraint 'bw[0] >> 2' needs exactly one of")
    with pytest.raises(LibraError) as e:
        load_constraints_file(tmp_path / "none.txt", NET)
    assert str(e.value) == f"{tmp_path / 'none.txt'}: constraints file not found"
