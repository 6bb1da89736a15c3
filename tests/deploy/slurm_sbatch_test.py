#!/usr/bin/env python3
"""deploy/slurm/hoist.sbatch under a stand-in Slurm: fake scontrol and srun on PATH, the
variables Slurm sets for a 2-node x 2-task job.

Checks that the script makes a 0600 control token (and refuses one that others may read), starts
`hoist train` through srun with metrics, control and --resume, writes the file_sd target list of
all four ranks while the job runs and removes it afterwards, passes srun's exit code on, and
passes SIGTERM on to srun (Slurm's --signal before the time limit, or scancel).

  slurm_sbatch_test.py --source-dir DIR
"""

import argparse
import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

FAKE_SCONTROL = """#!/usr/bin/env bash
[[ "$1 $2" == "show hostnames" ]] || exit 2
printf 'nodeA\\nnodeB\\n'
"""

# Records its arguments and environment, and a copy of the target list as it was at start; then
# exits with FAKE_SRUN_EXIT, or with FAKE_SRUN_WAIT waits for SIGTERM.
FAKE_SRUN = """#!/usr/bin/env bash
out=$FAKE_SRUN_OUT
printf '%s\\n' "$@" >"$out/args"
env >"$out/env"
cp "$HOIST_TARGETS_DIR/hoist-slurm-$SLURM_JOB_ID.json" "$out/targets.json" 2>/dev/null || true
if [[ -n ${FAKE_SRUN_WAIT:-} ]]; then
  trap 'echo TERM >"$out/signal"; exit 0' TERM
  touch "$out/started"
  while true; do sleep 0.05; done
fi
exit "${FAKE_SRUN_EXIT:-0}"
"""


def write_tool(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


class Setup:
    def __init__(self, root, source_dir):
        self.root = root
        self.script = os.path.join(source_dir, "deploy", "slurm", "hoist.sbatch")
        self.bin = os.path.join(root, "bin")
        self.out = os.path.join(root, "out")
        self.targets = os.path.join(root, "targets")
        self.home = os.path.join(root, "home")
        for d in (self.bin, self.out, self.targets, self.home):
            os.makedirs(d, exist_ok=True)
        write_tool(os.path.join(self.bin, "scontrol"), FAKE_SCONTROL)
        write_tool(os.path.join(self.bin, "srun"), FAKE_SRUN)
        write_tool(os.path.join(self.bin, "hoist"), "#!/bin/sh\nexit 0\n")
        self.config = os.path.join(root, "job.json")
        with open(self.config, "w") as f:
            f.write("{}\n")
        self.token = os.path.join(self.home, ".config", "hoist", "control-token")
        self.env = {
            "PATH": self.bin + os.pathsep + "/usr/bin:/bin",
            "HOME": self.home,
            "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "itjob", "SLURM_NTASKS": "4",
            "SLURM_JOB_NODELIST": "node[A-B]", "SLURM_TASKS_PER_NODE": "2(x2)",
            "SLURM_CPUS_PER_TASK": "3", "SLURM_SUBMIT_DIR": source_dir,
            "HOIST_CONFIG": self.config, "HOIST_TARGETS_DIR": self.targets,
            "FAKE_SRUN_OUT": self.out,
        }

    def run(self, **extra):
        return subprocess.run(["bash", self.script], env=dict(self.env, **extra),
                              capture_output=True, text=True, timeout=30)

    def args(self):
        with open(os.path.join(self.out, "args")) as f:
            return f.read().splitlines()

    def srun_env(self):
        with open(os.path.join(self.out, "env")) as f:
            return dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)

    def reset(self):
        for name in os.listdir(self.out):
            os.remove(os.path.join(self.out, name))


def expect(condition, message, result=None):
    if not condition:
        detail = f"\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}" if result else ""
        util.fail(message + detail)


def sets(args):
    return {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--set"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="hoist_sbatch_") as root:
        s = Setup(root, args.source_dir)

        # A first run makes the token, starts the ranks and cleans up after them.
        r = s.run(FAKE_SRUN_EXIT="3")
        expect(r.returncode == 3, f"srun's exit code 3 came back as {r.returncode}", r)
        mode = stat.S_IMODE(os.stat(s.token).st_mode)
        expect(mode == 0o600, f"the new token has mode {oct(mode)}, not 0600")
        with open(s.token) as f:
            expect(len(f.read().strip()) >= 32, "the new token is shorter than 32 characters")
        argv = s.args()
        expect(argv[:3] == ["--mpi=pmix", "--kill-on-bad-exit=1", "--cpu-bind=cores"],
               f"srun's options: {argv[:3]}")
        expect(argv[3:8] == ["hoist", "train", "-c", s.config, "--resume"],
               f"srun does not start `hoist train -c CONFIG --resume`: {argv}")
        wanted = {"metrics.enabled=true", "metrics.bind=0.0.0.0", "metrics.port=9400",
                  "control.enabled=true", "control.port=7070", "control.bind=127.0.0.1",
                  f"control.token_file={s.token}"}
        expect(wanted <= sets(argv), f"missing --set {sorted(wanted - sets(argv))} in {argv}")
        env = s.srun_env()
        for key, value in {"OMP_NUM_THREADS": "3", "MASTER_ADDR": "nodeA",
                           "HOIST_JOB_ID": "slurm-4242"}.items():
            expect(env.get(key) == value, f"srun got {key}={env.get(key)}, not {value}")
        with open(os.path.join(s.out, "targets.json")) as f:
            targets = json.load(f)
        got = [(t["targets"][0], t["labels"]["local_rank"], t["labels"]["host"],
                t["labels"]["training_job"], t["labels"]["slurm_job_id"]) for t in targets]
        expect(got == [("nodeA:9400", "0", "nodeA", "itjob", "4242"),
                       ("nodeA:9401", "1", "nodeA", "itjob", "4242"),
                       ("nodeB:9400", "0", "nodeB", "itjob", "4242"),
                       ("nodeB:9401", "1", "nodeB", "itjob", "4242")],
               f"the target list while the job ran: {got}")
        expect(os.listdir(s.targets) == [],
               f"the target list outlived the job: {os.listdir(s.targets)}")

        # TLS moves the control service onto every address.
        s.reset()
        r = s.run(HOIST_CONTROL_TLS_CERT="/etc/c.pem", HOIST_CONTROL_TLS_KEY="/etc/k.pem",
                  HOIST_METRICS_PORT="9500")
        expect(r.returncode == 0, "the TLS run failed", r)
        wanted = {"control.bind=0.0.0.0", "control.tls.cert=/etc/c.pem",
                  "control.tls.key=/etc/k.pem", "metrics.port=9500"}
        expect(wanted <= sets(s.args()), f"missing {sorted(wanted - sets(s.args()))}")

        # A token that others may read is refused before anything starts.
        s.reset()
        os.chmod(s.token, 0o644)
        r = s.run()
        expect(r.returncode != 0 and "chmod 600" in r.stderr,
               "a token of mode 0644 was not refused with the fix", r)
        expect(not os.path.exists(os.path.join(s.out, "args")), "srun ran with a 0644 token")
        os.chmod(s.token, 0o600)

        # SIGTERM to the batch shell reaches srun; the script ends with srun and cleans up.
        s.reset()
        proc = subprocess.Popen(["bash", s.script], env=dict(s.env, FAKE_SRUN_WAIT="1"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 20
            util.wait_for("srun starting", lambda: os.path.exists(os.path.join(s.out, "started")),
                          deadline, proc)
            expect(len(os.listdir(s.targets)) == 1, "no target list while the job runs")
            proc.send_signal(signal.SIGTERM)
            try:
                out, err = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                util.fail("the script or its srun did not end within 20 s of SIGTERM")
        finally:
            # The fake srun, should the script have left it behind.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        expect(os.path.exists(os.path.join(s.out, "signal")), "srun never got the SIGTERM")
        expect(proc.returncode == 0, f"the script exited {proc.returncode} after srun ended "
                                     f"cleanly:\n{out}\n{err}")
        expect(os.listdir(s.targets) == [], "the target list outlived the signalled job")
    print("PASSED")


if __name__ == "__main__":
    main()
