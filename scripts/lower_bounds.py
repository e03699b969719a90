"""Print every dependency of kagent pinned to the lower bound pyproject.toml declares, one
`name==version` line each, as a pip constraints file: scripts/check_lower_bounds.sh installs
kagent under these pins, so that the lower bounds are versions the tests ran against.

    python3 scripts/lower_bounds.py [--except NAME ...] [--extra NAME ...]

The runtime dependencies always; an optional group's (such as `test`) only with --extra.
--except leaves a dependency out (torch, whose lower bound stands for a CUDA API that a CPU
machine cannot exercise, is installed at the version the check names instead).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
# The one form tests/test_packaging.py allows: a name, a lower bound and an upper bound.
BOUNDED = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*>=\s*(?P<low>[0-9][0-9A-Za-z.]*)"
    r"\s*,\s*<\s*[0-9][0-9.]*$"
)


def lower_bounds(project: dict, extras: list[str]) -> dict[str, str]:
    """Each dependency's name and lower bound, in pyproject's order."""
    lines = list(project["dependencies"])
    for extra in extras:
        if extra not in project.get("optional-dependencies", {}):
            raise SystemExit(f"pyproject.toml has no optional dependency group {extra!r}")
        lines += project["optional-dependencies"][extra]
    bounds: dict[str, str] = {}
    for line in lines:
        match = BOUNDED.match(line.strip())
        if not match:
            raise SystemExit(f"pyproject.toml: {line!r} is not of the form 'name>=low,<high'")
        bounds[match["name"].lower()] = match["low"]
    return bounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--except", dest="left_out", action="append", default=[], metavar="NAME")
    parser.add_argument("--extra", dest="extras", action="append", default=[], metavar="NAME")
    args = parser.parse_args()
    if sys.version_info < (3, 11):
        raise SystemExit("reading pyproject.toml takes tomllib: Python 3.11 or later")
    import tomllib

    project = tomllib.loads(PYPROJECT.read_text())["project"]
    bounds = lower_bounds(project, args.extras)
    unknown = {name.lower() for name in args.left_out} - set(bounds)
    if unknown:
        raise SystemExit(f"--except names no dependency: {', '.join(sorted(unknown))}")
    for name, low in bounds.items():
        if name not in {left.lower() for left in args.left_out}:
            print(f"{name}=={low}")


if __name__ == "__main__":
    main()
