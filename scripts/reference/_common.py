"""Helpers shared by the fixture generators in scripts/reference/."""
import json
import os
from importlib import metadata


def fixture_dir(name):
    """tests/data/NAME/, created; the generators run from the repository root."""
    path = os.path.join("tests", "data", name)
    os.makedirs(path, exist_ok=True)
    return path


def write_versions(path, packages):
    """Records the versions of `packages` that made the fixtures in `path`."""
    versions = {p: metadata.version(p) for p in packages}
    with open(os.path.join(path, "versions.json"), "w") as f:
        json.dump(versions, f, indent=2, sort_keys=True)
        f.write("\n")
