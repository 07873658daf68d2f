"""The verdicts and tables of tools/predict_grid.py: a case's agreement with the binary, the
summary per set of inputs, the refusals, the failures, the grid's figures per factor value, and
their markdown (written between two markers of a documentation page).
"""

from __future__ import annotations

import re
from pathlib import Path


def verdict(res: dict) -> tuple[str, float | None]:
    """'exact', 'close' (error given), 'refused' (both), or a failure: 'predict refuses',
    'ASTRA-sim fails', 'ranks differ'."""
    sim, pred = res["sim"], res["pred"]
    if isinstance(sim, str) and isinstance(pred, str):
        return "refused", None
    if isinstance(pred, str):
        return "predict refuses", None
    if isinstance(sim, str):
        return "ASTRA-sim fails", None
    if set(sim) != set(pred):
        return "ranks differ", None
    err = max(max(abs(pred[r][0] - t), abs(pred[r][1] - e)) / max(t, 1) for r, (t, e) in sim.items())
    return ("exact" if err == 0 else "close"), err


def doctor_agrees(res: dict) -> bool:
    """doctor --system says the run fails (or refuses the files) exactly when ASTRA-sim fails."""
    return isinstance(res["sim"], str) == (res.get("doctor", "runs") != "runs")


def run_time_error(res: dict) -> float | None:
    """The relative error of the run's time (the slowest rank's finish), when both answered."""
    sim, pred = res["sim"], res["pred"]
    if isinstance(sim, str) or isinstance(pred, str):
        return None
    t = max(v[0] for v in sim.values())
    return abs(max(v[0] for v in pred.values()) - t) / max(t, 1)


def summarize(results: list[dict]) -> list[list[str]]:
    """One row per set: cases, exact, within 0.1%, within 1%, worst error, refused, failed."""
    rows = [["inputs", "cases", "exact on every rank", "within 0.1%", "within 1%", "worst error (any rank)",
             "worst error (run time)", "refused (ASTRA-sim fails too)", "wrong", "doctor --system agrees"]]
    by: dict[str, list[dict]] = {}
    by["all"] = list(results)
    for r in results:
        by.setdefault(r["case"]["set"], []).append(r)
    for name, rs in by.items():
        errs = [r["error"] for r in rs if r["verdict"] in ("exact", "close")]
        rows.append([name, str(len(rs)), str(sum(r["verdict"] == "exact" for r in rs)),
                     str(sum(e <= 1e-3 for e in errs)), str(sum(e <= 1e-2 for e in errs)),
                     f"{max(errs, default=0):.4%}",
                     f"{max((e for e in map(run_time_error, rs) if e is not None), default=0):.4%}",
                     str(sum(r["verdict"] == "refused" for r in rs)),
                     str(sum(r["verdict"] not in ("exact", "close", "refused") or (r["error"] or 0) > 1e-2
                             for r in rs)),
                     str(sum(doctor_agrees(r) for r in rs))])
    return rows


def short_sim(sim: str) -> str:
    return sim.split(":", 1)[0] + (" (abort)" if sim.startswith("exit -6") else "")


def _reason(line: str) -> str:
    """A refusal without its paths and counts, to group equal ones."""
    line = re.sub(r"[^\s']*/[^\s:']+", "FILE", line)
    return re.sub(r"\b(rank|and) \d+", r"\1 N", line).removeprefix("FILE: ")


def refusals(results: list[dict]) -> list[list[str]]:
    """Distinct refusals with their counts and how the binary failed on them."""
    seen: dict[str, list] = {}
    for r in results:
        if r["verdict"] == "refused":
            entry = seen.setdefault(_reason(r["pred"]), [0, set()])
            entry[0] += 1
            entry[1].add(re.sub(r"\d+ of \d+", "0 of N", short_sim(r["sim"])))
    return [["cases", "predict's line", "ASTRA-sim"]] + [
        [str(n), reason, "; ".join(sorted(sims))] for reason, (n, sims) in sorted(seen.items(), key=lambda kv: -kv[1][0])]


def failures(results: list[dict]) -> list[list[str]]:
    """Every case not within 1% or refused by one side only."""
    rows = [["inputs", "workload", "system", "result"]]
    for r in results:
        v, c = r["verdict"], r["case"]
        if not doctor_agrees(r):
            sim = "ASTRA-sim runs it" if isinstance(r["sim"], dict) else f"ASTRA-sim: {short_sim(r['sim'])}"
            rows.append([c["set"], c["workload"], c["variant"], f"doctor --system {r['doctor'][:90]}; {sim}"])
        if v in ("exact", "refused") or v == "close" and r["error"] <= 1e-2:
            continue
        what = (f"{r['error']:+.3%}" if v == "close" else
                f"predict refuses: {_reason(r['pred'])[:150]}" if v == "predict refuses" else
                f"ASTRA-sim fails ({r['sim'][:70]}), predict answers" if v == "ASTRA-sim fails" else v)
        rows.append([c["set"], c["workload"], c["variant"], what])
    return rows


def per_value(results: list[dict], order: list[str]) -> list[list[str]]:
    """Grid cases per factor value: cases, exact, worst error, refused."""
    acc: dict[tuple, list] = {}
    for r in results:
        if r["case"]["set"] != "grid":
            continue
        for k, v in r["case"]["factors"].items():
            a = acc.setdefault((k, str(v)), [0, 0, 0.0, 0])
            a[0] += 1
            a[1] += r["verdict"] == "exact"
            a[2] = max(a[2], r["error"] or 0.0)
            a[3] += r["verdict"] == "refused"
    return [["factor", "value", "cases", "exact", "worst error", "refused"]] + [
        [k, v, str(n), str(e), f"{w:.4%}", str(f)]
        for (k, v), (n, e, w, f) in sorted(acc.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1]))]


def markdown(tables: list[tuple[str, list[list[str]]]], command: str) -> str:
    out = [f"<!-- written by {command}; do not edit by hand -->", ""]
    for title, rows in tables:
        out += [f"#### {title}", "", "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
        out.append("")
    return "\n".join(out)


BEGIN, END = "<!-- predict_grid tables -->", "<!-- end of predict_grid tables -->"


def write_markdown(path: Path, tables_md: str) -> None:
    """The tables between BEGIN and END of an existing page (the rest kept), or a new file."""
    text = path.read_text() if path.is_file() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = f"{head}{BEGIN}\n{tables_md}\n{END}{rest.split(END, 1)[1]}"
    else:
        text = f"{BEGIN}\n{tables_md}\n{END}\n"
    path.write_text(text)


def print_results(results: list[dict], echo=print) -> None:
    """One line per case."""
    echo(f"{'set':<8} {'workload':<40} {'system':<62} {'simulated ns':>13} {'predicted ns':>13}  result")
    for r in results:
        case, v, err = r["case"], r["verdict"], r["error"]
        sim = f"{max(t for t, _ in r['sim'].values()):,}" if isinstance(r["sim"], dict) else "-"
        pred = f"{max(t for t, _ in r['pred'].values()):,}" if isinstance(r["pred"], dict) else "-"
        why = ("exact" if v == "exact" else f"{err:+.4%}" if v == "close" else
               f"refused: {r['pred'][-90:]}" if v == "refused" else
               f"WRONG ({v}): {r['sim'] if isinstance(r['sim'], str) else r['pred']}"[:200])
        echo(f"{case['set']:<8} {case['workload'][:40]:<40} {case['variant'][:62]:<62} {sim:>13} {pred:>13}  {why}")


def tables(results: list[dict], order: list[str]) -> list[tuple[str, list[list[str]]]]:
    return [("Summary", summarize(results)), ("Refused by predict, and not finished by ASTRA-sim", refusals(results)),
            ("Not within 1%, refused by one side only, or doctor --system not agreeing", failures(results)),
            ("Grid cases per value of each factor", per_value(results, order))]


def print_tables(results: list[dict], order: list[str], echo=print) -> None:
    for title, rows in tables(results, order):
        echo(f"\n{title}")
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for row in rows:
            echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def wrong_count(results: list[dict]) -> int:
    """Cases not within 1%, or refused by one side only (the summary's "wrong" of all sets)."""
    rows = summarize(results)
    return int(rows[1][rows[0].index("wrong")]) if results else 0
