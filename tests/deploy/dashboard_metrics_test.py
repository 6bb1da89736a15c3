#!/usr/bin/env python3
"""The Grafana dashboard and the Prometheus rules ask only for what hoist serves.

Runs a short `hoist train` with metrics on an ephemeral port, scrapes it once a step has been
taken, and checks every PromQL expression of the dashboard (panel targets and template variable
queries) and of the rules files against that scrape:
  - every metric name starting with hoist_ is one the exporter serves; names with a colon are
    recording rules defined in the rules files;
  - every label a selector matches on is one the metric carries (or a target label that the
    scrape configs add), and every value matched with = (or with a plain a|b alternation) is one
    the exporter serves;
  - every label an aggregation groups by is one that its metrics or the targets carry;
  - every hoist_ metric the exporter serves appears in some dashboard panel.
It also checks the dashboard's shape: valid JSON, unique panel ids, panels on the 24-column grid
without overlaps, every query on the ${datasource} variable, the job/instance/rank variables.

  dashboard_metrics_test.py --hoist BIN --dashboard JSON [--rules YML]... [--promtool PATH]

With --promtool the scrape must also pass `promtool check metrics` (DESIGN.md, Metrics).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

# Labels that Prometheus or the scrape configs in deploy/ attach to every target.
TARGET_LABELS = {"job", "instance", "host", "local_rank", "training_job", "slurm_job_id"}
# PromQL words that look like identifiers but are not metric names.
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
    "offset", "inf", "nan", "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk",
    "bottomk", "quantile", "count_values", "group", "label_values", "query_result",
}
GRID_COLUMNS = 24


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)


def metric_names(expr):
    """Identifiers in expr that name metrics of hoist (hoist_...) or recording rules (a:b)."""
    text = strip_strings(expr)
    # Drop Grafana variables ($x, ${x}) and range/offset durations ([5m]).
    text = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    # Label names inside selectors and grouping clauses are not metric names.
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for word in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        if word.lower() in PROMQL_WORDS:
            continue
        if word.startswith("hoist_") or ":hoist_" in word:
            names.add(word)
    return names


def selectors(expr):
    """(metric, [(label, op, value)]) for every metric{...} selector in expr."""
    out = []
    for match in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}", expr):
        matchers = re.findall(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"',
                              match.group(2))
        out.append((match.group(1), matchers))
    return out


def grouping_labels(expr):
    labels = set()
    text = strip_strings(expr)
    for match in re.finditer(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        labels.update(x.strip() for x in match.group(1).split(",") if x.strip())
    return labels


def rule_exprs(path):
    """(exprs, recording rule names) of a Prometheus rules file, read line by line: `expr:` as a
    one-line scalar or as a block (| or >) indented below it."""
    exprs, records = [], set()
    with open(path) as f:
        lines = f.read().splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        record = re.match(r"^\s*-?\s*record:\s*(\S+)\s*$", line)
        if record:
            records.add(record.group(1).strip("'\""))
        match = re.match(r"^(\s*)-?\s*expr:\s*(.*)$", line)
        if not match:
            i += 1
            continue
        indent, rest = len(match.group(1)), match.group(2).strip()
        i += 1
        if rest and rest[0] in "|>":
            block = []
            while i < len(lines) and (not lines[i].strip() or
                                      len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i].strip())
                i += 1
            exprs.append(" ".join(block))
        else:
            if len(rest) >= 2 and rest[0] == rest[-1] and rest[0] in "'\"":
                rest = rest[1:-1]
            exprs.append(rest)
    if not exprs:
        util.fail(f"{path}: found no expr")
    return exprs, records


def walk_panels(panels):
    for panel in panels:
        yield panel
        yield from walk_panels(panel.get("panels", []))


def check_dashboard_shape(dashboard, errors):
    panels = list(walk_panels(dashboard.get("panels", [])))
    if not panels:
        errors.append("the dashboard has no panels")
    ids = [p.get("id") for p in panels]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if duplicates:
        errors.append(f"panel ids used more than once: {duplicates}")
    if any(not isinstance(i, int) for i in ids):
        errors.append("every panel needs an integer id")
    if not isinstance(dashboard.get("schemaVersion"), int) or dashboard["schemaVersion"] < 36:
        errors.append("schemaVersion must be a current Grafana's (36 or later)")
    for key in ("uid", "title"):
        if not dashboard.get(key):
            errors.append(f"the dashboard needs a {key}")

    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        errors.append("missing the template variable datasource (type datasource, prometheus)")
    for name in ("job", "instance", "rank"):
        if name not in variables or variables[name].get("type") != "query":
            errors.append(f"missing the query template variable {name}")

    def uses_datasource_variable(thing):
        source = thing.get("datasource") or {}
        return source.get("uid") == "${datasource}" and source.get("type") == "prometheus"

    boxes = []
    for panel in panels:
        title = panel.get("title", "?")
        grid = panel.get("gridPos") or {}
        if not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")):
            errors.append(f"panel {title!r} has no complete gridPos")
            continue
        if grid["x"] < 0 or grid["w"] <= 0 or grid["x"] + grid["w"] > GRID_COLUMNS:
            errors.append(f"panel {title!r} leaves the {GRID_COLUMNS}-column grid: {grid}")
        boxes.append((title, grid))
        if panel.get("type") == "row":
            continue
        if not uses_datasource_variable(panel):
            errors.append(f"panel {title!r} does not use the ${{datasource}} variable")
        if not panel.get("targets"):
            errors.append(f"panel {title!r} has no queries")
        for target in panel.get("targets", []):
            if not uses_datasource_variable(target):
                errors.append(f"a query of {title!r} does not use the ${{datasource}} variable")
            if not target.get("expr", "").strip():
                errors.append(f"a query of {title!r} has no expr")
    for i, (title_a, a) in enumerate(boxes):
        for title_b, b in boxes[i + 1:]:
            if (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and
                    a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]):
                errors.append(f"panels {title_a!r} and {title_b!r} overlap")


def dashboard_exprs(dashboard):
    """(where, expr) of every panel query and every query variable."""
    out = []
    for panel in walk_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            if "expr" in target:
                out.append((f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable.get("query")
            if isinstance(query, dict):
                query = query.get("query", "")
            out.append((f"variable {variable.get('name')}", query))
    return out


def scrape_running_job(hoist, workdir):
    children = util.Children()
    try:
        proc = children.start(
            [hoist, "train", *util.TINY_JOB, "--set", "metrics.enabled=true",
             "--set", "metrics.port=0"],
            os.path.join(workdir, "train.log"), cwd=workdir,
            env=dict(os.environ, OMP_NUM_THREADS="1"))
        deadline = time.monotonic() + 60

        def url():
            if proc.poll() is not None:
                util.refuse_build_without_prometheus(proc)
            urls = util.metrics_urls(util.read_log(proc))
            return urls[0] if urls else None

        metrics_url = util.wait_for("hoist train announcing its metrics URL", url, deadline, proc)

        def scrape_after_a_step():
            text = util.http_get(metrics_url)
            if text is None:
                return None
            steps = [v for n, _, v in util.parse_exposition(text) if n == "hoist_steps_total"]
            return text if steps and steps[0] >= 1 else None

        text = util.wait_for("a scrape after the first step", scrape_after_a_step, deadline, proc)
        code = children.stop(proc)
        if code != 143:  # stopped by SIGTERM (128 + 15), not finished
            util.fail(f"hoist train exited with {code} after SIGTERM:\n{util.log_tail(proc)}")
        return text
    finally:
        children.close()


def check_expr(where, expr, served, records, errors, used):
    names = metric_names(expr)
    for name in sorted(names):
        if ":" in name:
            if name not in records:
                errors.append(f"{where}: {name} is no recording rule of the rules files")
        elif name not in served:
            errors.append(f"{where}: hoist does not serve {name}")
        else:
            used.add(name)
    known_labels = set(TARGET_LABELS)
    for name in names:
        known_labels |= set(served.get(name, {}))
    for name, matchers in selectors(expr):
        if name not in served:
            continue
        for label, op, value in matchers:
            if label in TARGET_LABELS:
                continue
            if label not in served[name]:
                errors.append(f"{where}: {name} has no label {label}")
                continue
            values = served[name][label]
            if op == "=" and "$" not in value and value not in values:
                errors.append(f"{where}: {name}{{{label}=\"{value}\"}} is not served "
                              f"(values: {sorted(values)})")
            if op == "=~" and re.fullmatch(r"[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*", value):
                for alternative in value.split("|"):
                    if alternative not in values:
                        errors.append(f"{where}: {name}{{{label}=~\"{value}\"}}: "
                                      f"{alternative} is not served (values: {sorted(values)})")
    for label in sorted(grouping_labels(expr)):
        if label not in known_labels:
            errors.append(f"{where}: groups by {label}, which none of its metrics carries")
    for match in re.finditer(r"label_values\(\s*[^,()]+?\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)",
                             expr):
        if match.group(1) not in known_labels:
            errors.append(f"{where}: asks for the values of {match.group(1)}, which none of its "
                          "metrics carries")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hoist", required=True)
    parser.add_argument("--dashboard", required=True)
    parser.add_argument("--rules", action="append", default=[])
    parser.add_argument("--promtool", default="")
    args = parser.parse_args()
    args.hoist = util.hoist_binary(args.hoist)

    errors = []
    try:
        with open(args.dashboard) as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        util.fail(f"{args.dashboard}: not valid JSON: {e}")
    check_dashboard_shape(dashboard, errors)

    records = set()
    rules = []
    for path in args.rules:
        exprs, recorded = rule_exprs(path)
        records |= recorded
        rules += [(f"{os.path.basename(path)} expr {i + 1}", e) for i, e in enumerate(exprs)]

    with tempfile.TemporaryDirectory(prefix="hoist_deploy_") as workdir:
        text = scrape_running_job(args.hoist, workdir)
        if args.promtool:
            lint = subprocess.run([args.promtool, "check", "metrics"], input=text.encode(),
                                  capture_output=True, timeout=30)
            if lint.returncode != 0:
                errors.append("the scrape does not pass promtool check metrics:\n" +
                              (lint.stdout + lint.stderr).decode(errors="replace"))

    served = {}  # name -> {label: {values}}
    for name, labels, _ in util.parse_exposition(text):
        entry = served.setdefault(name, {})
        for label, value in labels.items():
            entry.setdefault(label, set()).add(value)
    for name, labels in served.items():
        if name.startswith("hoist_") and "rank" not in labels:
            errors.append(f"the exporter serves {name} without a rank label")

    used = set()
    panel_exprs = dashboard_exprs(dashboard)
    for where, expr in panel_exprs:
        check_expr(where, expr, served, records, errors, used)
    rule_used = set()
    for where, expr in rules:
        check_expr(where, expr, served, records, errors, rule_used)
    unused = sorted(n for n in served if n.startswith("hoist_") and n not in used)
    if unused:
        errors.append("the dashboard shows none of these served metrics (add a panel): " +
                      ", ".join(unused))

    print(f"scrape: {sum(1 for n in served if n.startswith('hoist_'))} hoist_ metrics; "
          f"dashboard: {len(panel_exprs)} queries using {len(used)} of them; "
          f"rules: {len(rules)} exprs")
    if errors:
        util.fail("\n  " + "\n  ".join(errors))
    print("PASSED")


if __name__ == "__main__":
    main()
