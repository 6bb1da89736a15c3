#!/usr/bin/env python3
"""deploy/systemd/hoist-train@.service passes `systemd-analyze verify` without a word of
complaint (verify exits 0 even for unknown keys and bad values, so any output fails), and keeps
the promises its header makes: restart on failure, --resume, metrics and control on, the token as
a credential. The unit's binary path is pointed at the built hoist for the check.

  systemd_unit_test.py --source-dir DIR --hoist BIN [--systemd-analyze PATH]
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploy_test_util as util  # noqa: E402

UNIT = "hoist-train@.service"
INSTALLED_BINARY = "/usr/local/bin/hoist"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--hoist", required=True)
    parser.add_argument("--systemd-analyze", default="")
    args = parser.parse_args()
    analyze = util.require_tool("systemd-analyze", args.systemd_analyze)
    args.hoist = util.hoist_binary(args.hoist)

    with open(os.path.join(args.source_dir, "deploy", "systemd", UNIT)) as f:
        text = f.read()
    # The lines of the [Service] section, continuation lines joined.
    joined = text.replace("\\\n", " ")
    keys = {}
    for line in joined.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            keys.setdefault(key.strip(), []).append(value.strip())
    exec_start = " ".join(keys.get("ExecStart", [""])[0].split())
    for needle in ("train -c /etc/hoist/%i.json --resume", "metrics.enabled=true",
                   "control.enabled=true", "control.token_file=%d/control-token"):
        if needle not in exec_start:
            util.fail(f"ExecStart lacks {needle!r}: {exec_start}")
    if keys.get("Restart") != ["on-failure"]:
        util.fail(f"Restart={keys.get('Restart')}, not on-failure")
    if not any(v.startswith("control-token:") for v in keys.get("LoadCredential", [])):
        util.fail("the control token is not loaded as the credential control-token")
    if INSTALLED_BINARY not in exec_start:
        util.fail(f"ExecStart does not run {INSTALLED_BINARY}")

    with tempfile.TemporaryDirectory(prefix="hoist_systemd_") as work:
        with open(os.path.join(work, UNIT), "w") as f:
            f.write(text.replace(INSTALLED_BINARY, os.path.abspath(args.hoist)))
        result = subprocess.run([analyze, "verify", "--man=no", f"./hoist-train@demo.service"],
                                cwd=work, capture_output=True, text=True, timeout=60)
    complaints = (result.stdout + result.stderr).strip()
    if result.returncode != 0 or complaints:
        util.fail(f"systemd-analyze verify (exit {result.returncode}):\n{complaints}")
    print("PASSED")


if __name__ == "__main__":
    main()
