#!/usr/bin/env python3
"""The YAML of deploy/ parses and says what hoist needs (needs PyYAML; skips without it).

  - k8s/hoist-mpijob.yaml: a kubeflow.org/v2beta1 MPIJob whose launcher runs `mpirun ... hoist
    train` with metrics and control on, worker ports metrics-0..N-1 on 9400 + N matching
    slotsPerWorker, the control port, the token Secret mounted where control.token_file points,
    and a PodMonitor scraping every metrics port;
  - grafana/provisioning: a Prometheus data source, and a file provider for the dashboards;
  - prometheus/*.yml: YAML that parses (promtool checks the meaning in its own tests).

  manifests_test.py --source-dir DIR
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

try:
    import yaml
except ImportError:
    util.skip("python3 has no yaml module (PyYAML)")


def expect(condition, message):
    if not condition:
        util.fail(message)


def sets(args):
    return {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--set"}


def check_mpijob(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {d["kind"]: d for d in docs}
    expect({"Secret", "MPIJob", "PodMonitor"} <= set(by_kind), f"kinds: {sorted(by_kind)}")
    job = by_kind["MPIJob"]
    expect(job["apiVersion"] == "kubeflow.org/v2beta1", f"MPIJob apiVersion {job['apiVersion']}")
    spec = job["spec"]
    slots = spec["slotsPerWorker"]
    workers = spec["mpiReplicaSpecs"]["Worker"]
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    argv = launcher["command"] + launcher["args"]
    expect(argv[0] == "mpirun", f"the launcher runs {argv[0]}, not mpirun")
    np = int(argv[argv.index("-np") + 1])
    expect(np == slots * workers["replicas"],
           f"-np {np} is not slotsPerWorker x workers = {slots * workers['replicas']}")
    expect(argv[argv.index("hoist"):argv.index("hoist") + 2] == ["hoist", "train"],
           "the launcher does not run hoist train")
    settings = sets(argv)
    for wanted in ("metrics.enabled=true", "metrics.bind=0.0.0.0", "control.enabled=true"):
        expect(wanted in settings, f"the launcher's hoist train lacks --set {wanted}")
    metrics_port = int(next(s for s in settings if s.startswith("metrics.port=")).split("=")[1])
    control_port = int(next(s for s in settings if s.startswith("control.port=")).split("=")[1])
    token_file = next(s for s in settings if s.startswith("control.token_file=")).split("=")[1]

    pod = workers["template"]
    container = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    expect({f"metrics-{r}": metrics_port + r for r in range(slots)}.items() <= ports.items(),
           f"worker ports {ports} are not metrics-R = {metrics_port} + R for {slots} slots")
    expect(ports.get("control") == control_port, f"no control port {control_port}: {ports}")
    expect(int(container["resources"]["limits"]["nvidia.com/gpu"]) == slots,
           "one rank per GPU: the GPU limit must equal slotsPerWorker")

    secret = by_kind["Secret"]["metadata"]["name"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    token_volume = next((n for n, v in volumes.items()
                         if v.get("secret", {}).get("secretName") == secret), None)
    expect(token_volume is not None, f"the Secret {secret} is not mounted in the workers")
    expect(token_file.startswith(mounts[token_volume] + "/"),
           f"control.token_file {token_file} is not in the Secret's mount {mounts[token_volume]}")
    expect(volumes[token_volume]["secret"].get("defaultMode") in (0o400, 0o600),
           "the token Secret is mounted readable by others")
    config_file = argv[argv.index("-c") + 1]
    expect(any(config_file.startswith(m + "/") for m in mounts.values()),
           f"the config {config_file} is in no mounted volume")

    monitor = by_kind["PodMonitor"]["spec"]
    labels = pod["metadata"]["labels"]
    expect(monitor["selector"]["matchLabels"].items() <= labels.items(),
           "the PodMonitor does not select the worker pods")
    scraped = {e["port"] for e in monitor["podMetricsEndpoints"]}
    expect(scraped == {f"metrics-{r}" for r in range(slots)},
           f"the PodMonitor scrapes {sorted(scraped)}, not every rank's port")
    for endpoint in monitor["podMetricsEndpoints"]:
        targets = {r.get("targetLabel") for r in endpoint.get("relabelings", [])}
        expect({"job", "training_job", "host", "local_rank"} <= targets,
               f"{endpoint['port']}: the relabelings do not set job, training_job, host, "
               "local_rank (the rules and the dashboard group by them)")


def check_grafana(grafana):
    with open(os.path.join(grafana, "provisioning", "datasources", "hoist.yaml")) as f:
        sources = yaml.safe_load(f)
    expect(sources.get("apiVersion") == 1, "datasources: apiVersion 1")
    expect(any(d.get("type") == "prometheus" and d.get("url") for d in sources["datasources"]),
           "datasources: no Prometheus data source with a url")
    with open(os.path.join(grafana, "provisioning", "dashboards", "hoist.yaml")) as f:
        dashboards = yaml.safe_load(f)
    expect(dashboards.get("apiVersion") == 1, "dashboards: apiVersion 1")
    provider = dashboards["providers"][0]
    expect(provider.get("type") == "file" and provider.get("options", {}).get("path"),
           "dashboards: no file provider with a path")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True)
    args = parser.parse_args()
    deploy = os.path.join(args.source_dir, "deploy")
    check_mpijob(os.path.join(deploy, "k8s", "hoist-mpijob.yaml"))
    check_grafana(os.path.join(deploy, "grafana"))
    prometheus = os.path.join(deploy, "prometheus")
    for name in sorted(os.listdir(prometheus)):
        if name.endswith((".yml", ".yaml")):
            with open(os.path.join(prometheus, name)) as f:
                expect(isinstance(yaml.safe_load(f), dict), f"{name} is not a YAML mapping")
    print("PASSED")


if __name__ == "__main__":
    main()
