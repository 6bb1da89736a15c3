#!/usr/bin/env python3
"""A real Prometheus server scrapes a real 2-rank hoist job through the deploy/ configuration.

  1. `hoist launch -n 2 -- train` (a tiny model) with metrics on two consecutive free ports;
  2. deploy/slurm/hoist-targets writes the file_sd target list for them;
  3. Prometheus runs deploy/prometheus/prometheus.yml and hoist-rules.yml (copied, with the
     intervals shortened to 1 s) on 127.0.0.1 with a free port and a temporary storage dir;
  4. once its query API returns the job's series: both ranks are up, carry the labels the
     target list and the relabeling give them, hold parameters on place device, and take steps;
     every rule evaluates without error; every query of the Grafana dashboard (its variables
     replaced) runs, and returns data where data is due.
Both processes are stopped with SIGTERM at the end (and killed on any failure). Exits 77 when
Prometheus is not installed.

  prometheus_integration_test.py --hoist BIN --source-dir DIR [--prometheus PATH]
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

OVERALL_TIMEOUT_S = 60
TRAINING_JOB = "deploy-it"
RANKS = 2
# Grafana's variables as a user would set them for this job.
DASHBOARD_VARIABLES = {
    "job": "hoist", "training_job": TRAINING_JOB, "instance": ".*", "rank": ".*",
    "place": "device", "__rate_interval": "10s", "__interval": "1s", "__range": "1m",
    "datasource": "",
}


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout()


def shorten_intervals(config_text):
    """The deploy config with every interval at 1 s (scrape_timeout must not exceed it)."""
    out, n = re.subn(r"(?m)^(\s*(?:scrape_interval|evaluation_interval|scrape_timeout|"
                     r"refresh_interval):\s*)\S+", r"\g<1>1s", config_text)
    if n < 3:
        util.fail(f"expected scrape_interval, scrape_timeout and evaluation_interval in the "
                  f"deploy config; replaced only {n}")
    return out


def query(base, promql):
    body = util.http_get(f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    if body is None:
        return None
    reply = json.loads(body)
    if reply.get("status") != "success":
        util.fail(f"query {promql!r} failed: {reply}")
    return reply["data"]["result"]


def query_status(base, promql):
    """(ok, result or error) without failing: for the dashboard's expressions."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            reply = json.loads(response.read())
    except urllib.error.HTTPError as e:
        reply = json.loads(e.read() or b"{}")
    if reply.get("status") != "success":
        return False, reply.get("error", reply)
    return True, reply["data"]["result"]


def unix_time(rfc3339):
    """Seconds since the epoch of Prometheus' RFC 3339 times (nanoseconds, Z); 0 for none."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", rfc3339 or "")
    if not match:
        return 0.0
    whole = datetime.datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%S")
    seconds = whole.replace(tzinfo=datetime.timezone.utc).timestamp()
    return seconds + float(match.group(2) or 0)


def substitute(expr):
    def value(match):
        name = match.group(1) or match.group(2)
        if name not in DASHBOARD_VARIABLES:
            util.fail(f"the dashboard uses the variable ${name}, unknown to this test: {expr}")
        return DASHBOARD_VARIABLES[name]
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", value, expr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hoist", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--prometheus", default="")
    args = parser.parse_args()
    prometheus = util.require_tool("prometheus", args.prometheus)
    args.hoist = util.hoist_binary(args.hoist)
    deploy = os.path.join(args.source_dir, "deploy")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(OVERALL_TIMEOUT_S)
    start = time.monotonic()
    deadline = start + OVERALL_TIMEOUT_S - 5
    children = util.Children()
    workdir = tempfile.mkdtemp(prefix="hoist_prometheus_it_")
    try:
        run(args, prometheus, deploy, workdir, children, deadline)
        print(f"PASSED in {time.monotonic() - start:.1f} s")
    except Timeout:
        util.fail(f"the test ran past {OVERALL_TIMEOUT_S} s; stopped everything")
    finally:
        signal.alarm(0)
        children.close()
        shutil.rmtree(workdir, ignore_errors=True)


def run(args, prometheus, deploy, workdir, children, deadline):
    # 1. The job.
    metrics_port = util.free_port(count=RANKS)
    job_dir = os.path.join(workdir, "job")
    os.makedirs(job_dir)
    job = children.start(
        [args.hoist, "launch", "-n", str(RANKS), "--", "train", *util.TINY_JOB,
         "--set", "metrics.enabled=true", "--set", f"metrics.port={metrics_port}"],
        os.path.join(workdir, "job.log"), cwd=job_dir, env=dict(os.environ, OMP_NUM_THREADS="1"))

    def all_ranks_serving():
        if job.poll() is not None:
            util.refuse_build_without_prometheus(job)
        return len(util.metrics_urls(util.read_log(job))) >= RANKS
    util.wait_for("every rank announcing its metrics URL", all_ranks_serving, deadline, job)

    # 2. The target list, as the Slurm script writes it; the second rank's entry loses its host
    # label, which the scrape config's relabeling then derives from the address.
    config_dir = os.path.join(workdir, "prometheus")
    os.makedirs(os.path.join(config_dir, "targets"))
    subprocess.run(
        [os.path.join(deploy, "slurm", "hoist-targets"), "--port", str(metrics_port),
         "--tasks-per-node", str(RANKS), "--label", f"training_job={TRAINING_JOB}",
         "-o", os.path.join(config_dir, "targets", "it.json"), "127.0.0.1"],
        check=True, timeout=10)
    with open(os.path.join(config_dir, "targets", "it.json")) as f:
        target_list = json.load(f)
    del target_list[1]["labels"]["host"]
    with open(os.path.join(config_dir, "targets", "it.json"), "w") as f:
        json.dump(target_list, f)

    # 3. Prometheus with the deploy config and rules.
    with open(os.path.join(deploy, "prometheus", "prometheus.yml")) as f:
        config = shorten_intervals(f.read())
    with open(os.path.join(config_dir, "prometheus.yml"), "w") as f:
        f.write(config)
    shutil.copy(os.path.join(deploy, "prometheus", "hoist-rules.yml"), config_dir)
    server = None
    for attempt in range(3):
        port = util.free_port()
        server = children.start(
            [prometheus, f"--config.file={os.path.join(config_dir, 'prometheus.yml')}",
             f"--storage.tsdb.path={os.path.join(workdir, f'tsdb{attempt}')}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            os.path.join(workdir, f"prometheus{attempt}.log"))
        base = f"http://127.0.0.1:{port}"
        ready = None
        while time.monotonic() < deadline and server.poll() is None:
            ready = util.http_get(f"{base}/-/ready", timeout_s=1)
            if ready is not None:
                break
            time.sleep(0.1)
        if ready is not None:
            break
        if server.poll() is None or "address already in use" not in util.read_log(server):
            util.fail(f"Prometheus did not become ready:\n{util.log_tail(server)}")
    else:
        util.fail("Prometheus found no free port in 3 attempts")

    # 4. The series, through the query API.
    selector = f'job="hoist", training_job="{TRAINING_JOB}"'

    def memory_of_every_rank():
        result = query(base, f"hoist_memory_bytes{{{selector}}}") or []
        return result if len({s["metric"]["rank"] for s in result}) == RANKS else None
    memory = util.wait_for("Prometheus returning hoist_memory_bytes of every rank",
                           memory_of_every_rank, deadline, server, interval_s=0.25)
    for series in memory:
        labels = series["metric"]
        local_rank = int(labels["instance"].rsplit(":", 1)[1]) - metrics_port
        expected = {"host": "127.0.0.1", "local_rank": str(local_rank),
                    "training_job": TRAINING_JOB}
        wrong = {k: labels.get(k) for k, v in expected.items() if labels.get(k) != v}
        if wrong:
            util.fail(f"series {labels} has wrong target labels {wrong}; expected {expected}")
    # 4 places x 6 categories per rank.
    if len(memory) != RANKS * 24:
        util.fail(f"expected {RANKS * 24} hoist_memory_bytes series, got {len(memory)}")
    params = query(base, f'hoist_memory_bytes{{{selector}, place="device", category="param"}} > 0')
    if {s["metric"]["rank"] for s in params} != {str(r) for r in range(RANKS)}:
        util.fail(f"not every rank holds parameters on place device: {params}")
    up = query(base, f"up{{{selector}}} == 1")
    if len(up) != RANKS:
        util.fail(f"expected {RANKS} targets up, got {up}")
    util.wait_for("every rank taking steps",
                  lambda: len(query(base, f"hoist_steps_total{{{selector}}} >= 2") or []) == RANKS,
                  deadline, job, interval_s=0.25)

    # Every rule evaluated, without error, since every rank has been scraped.
    ranks_scraped_at = float(query(base, "time()")[1])

    def rules_evaluated():
        body = util.http_get(f"{base}/api/v1/rules")
        if body is None:
            return None
        rules = [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
        fresh = [r for r in rules if unix_time(r.get("lastEvaluation")) > ranks_scraped_at]
        bad = [(r["name"], r.get("lastError")) for r in fresh if r.get("health") != "ok"]
        if bad:
            util.fail(f"rules failing to evaluate: {bad}")
        return rules if rules and len(fresh) == len(rules) else None
    rules = util.wait_for("every rule evaluated", rules_evaluated, deadline, server,
                          interval_s=0.25)
    throughput = util.wait_for(
        "the recording rule of throughput",
        lambda: query(base, f'training_job:hoist_tokens_per_second:avg{{{selector}}} > 0'),
        deadline, server, interval_s=0.25)

    # Every dashboard query runs; all but those that select failures return data.
    with open(os.path.join(deploy, "grafana", "dashboards", "hoist.json")) as f:
        dashboard = json.load(f)
    exprs = []
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop()
        stack += panel.get("panels", [])
        exprs += [(panel["title"], t["expr"]) for t in panel.get("targets", []) if "expr" in t]

    missing = []

    def dashboard_queries():
        missing.clear()
        for title, expr in exprs:
            ok, result = query_status(base, substitute(expr))
            if not ok:
                util.fail(f"panel {title!r}: Prometheus refuses {expr!r}: {result}")
            if not result and "== 0" not in expr:
                missing.append(f"{title}: {substitute(expr)}")
        return not missing
    while not dashboard_queries():
        if time.monotonic() > deadline:
            util.fail("dashboard queries without data:\n  " + "\n  ".join(missing))
        time.sleep(0.5)

    print(f"{len(memory)} memory series, {len(rules)} rules ok, tokens/s "
          f"{float(throughput[0]['value'][1]):.0f}, {len(exprs)} dashboard queries answered")

    # Clean stops: the job ends at a step boundary and exits 143 (stopped by SIGTERM, not
    # finished), Prometheus exits 0.
    code = children.stop(job, grace_s=20)
    if code != 143:
        util.fail(f"hoist launch exited with {code} after SIGTERM:\n{util.log_tail(job)}")
    server_code = children.stop(server, grace_s=20)
    if server_code != 0:
        util.fail(f"Prometheus exited with {server_code} after SIGTERM:\n{util.log_tail(server)}")
    print(f"stopped: hoist launch exit {code}, Prometheus exit {server_code}")


if __name__ == "__main__":
    main()
