"""Helpers for the deploy/ tests: free ports, a small `hoist train` with metrics, scrapes, and
child processes that cannot outlive the test.

Every child runs in its own process group and gets SIGKILL when the test process dies
(PR_SET_PDEATHSIG), and Children.close() stops them with SIGTERM, then SIGKILL after a grace
period. Tests exit 77 (ctest's SKIP_RETURN_CODE) for a missing tool, 1 for a failure."""

import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

SKIP = 77

# A model small enough that a step takes milliseconds on one core, with no files written but the
# log the test asks for (no checkpoints, no JSONL, no evaluation).
TINY_JOB = [
    "--set", "model.n_layer=2", "--set", "model.n_embd=32", "--set", "model.n_head=2",
    "--set", "model.seq_len=32", "--set", "train_batch_size=16",
    "--set", "train_micro_batch_size_per_gpu=4", "--set", "gradient_accumulation_steps=null",
    "--set", "train.steps=1000000", "--set", "scheduler.params.total_num_steps=1000000",
    "--set", "scheduler.params.warmup_num_steps=2", "--set", "train.eval_interval=0",
    "--set", "steps_per_print=0", "--set", "checkpoint.dir=",
    "--set", "checkpoint.interval_steps=0", "--set", "monitor.jsonl.path=",
]

PR_SET_PDEATHSIG = 1


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(SKIP)


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def _die_with_parent():
    os.setsid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def free_port(count=1, host="127.0.0.1", tries=50):
    """A port P such that P .. P+count-1 could all be bound just now (the system picks P)."""
    for _ in range(tries):
        with contextlib.ExitStack() as stack:
            first = stack.enter_context(socket.socket())
            first.bind((host, 0))
            port = first.getsockname()[1]
            if port + count - 1 > 65535:
                continue
            ok = True
            for extra in range(1, count):
                s = stack.enter_context(socket.socket())
                try:
                    s.bind((host, port + extra))
                except OSError:
                    ok = False
                    break
            if ok:
                return port
    fail(f"found no {count} consecutive free ports on {host}")


class Children:
    """Processes started by a test, stopped in reverse order by close()."""

    def __init__(self):
        self.procs = []

    def start(self, argv, log_path, cwd=None, env=None):
        log = open(log_path, "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                preexec_fn=_die_with_parent)
        log.close()
        proc.log_path = log_path
        self.procs.append(proc)
        return proc

    def stop(self, proc, grace_s=10):
        """SIGTERM to the process (as systemd's KillMode=mixed or an operator would send it: a
        launcher passes it on to its workers), SIGKILL to its whole group after grace_s; returns
        the exit code."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Whatever the group leader left behind.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.returncode

    def close(self):
        for proc in reversed(self.procs):
            self.stop(proc, grace_s=5)


def read_log(proc):
    with open(proc.log_path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def log_tail(proc, lines=30):
    return "\n".join(read_log(proc).splitlines()[-lines:])


def wait_for(what, predicate, deadline, proc=None, interval_s=0.1):
    """Polls predicate() until it returns a true value (returned), the deadline passes or `proc`
    exits (both fail the test)."""
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            fail(f"{what}: the process exited with {proc.returncode} first:\n{log_tail(proc)}")
        if time.monotonic() > deadline:
            detail = f"\n{log_tail(proc)}" if proc is not None else ""
            fail(f"{what}: timed out{detail}")
        time.sleep(interval_s)


def http_get(url, timeout_s=5):
    """The body of url, or None when it cannot be fetched (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode("utf-8")
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def metrics_urls(log_text):
    return re.findall(r"metrics: serving (http://\S+/metrics)", log_text)


def refuse_build_without_prometheus(proc):
    """Skips when the hoist binary was built without prometheus-cpp."""
    if "built without Prometheus support" in read_log(proc):
        skip("this hoist was built without prometheus-cpp (HOIST_WITH_PROMETHEUS)")


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    """Prometheus text format -> list of (name, {label: value}, float value)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            fail(f"cannot read the exposition line {line!r}")
        labels = dict(_LABEL.findall(match.group(2) or ""))
        samples.append((match.group(1), labels, float(match.group(3))))
    return samples


def hoist_binary(path):
    """The absolute path of the hoist binary given on the command line; fails when it is not
    built."""
    path = os.path.abspath(path)
    if not os.access(path, os.X_OK):
        fail(f"{path} is not an executable: build the hoist target first")
    return path


def require_tool(name, given=None):
    """The path of a tool (given on the command line, or on PATH); skips when there is none."""
    path = given or shutil.which(name)
    if not path or not os.access(path, os.X_OK):
        skip(f"{name} is not installed")
    return path
