"""mypy over kagent as it installs: the repository's folders are the subpackages of one `kagent`
namespace (pyproject's package-dir), a mapping mypy cannot be given, so a tree of links under
build/typecheck/ lays the package out as an install does, and mypy checks that.

    python scripts/typecheck.py [mypy options]      (the settings are pyproject's [tool.mypy])
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
TREE = REPO / "build" / "typecheck"


def lay_out() -> Path:
    """build/typecheck/kagent/<subpackage> -> the repository folder that installs as it."""
    package_dirs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    root = TREE / "kagent"
    root.mkdir(parents=True)
    # kagent is a namespace package when installed; here a package, so that mypy names its
    # modules from it (kagent.agent..., not agent...).
    (root / "__init__.py").touch()
    for name, folder in package_dirs.items():
        parts = name.split(".")
        if len(parts) == 2:  # kagent.<name>: its subpackages lie in its folder already
            (root / parts[1]).symlink_to(REPO / folder, target_is_directory=True)
    return root


def main() -> int:
    lay_out()
    command = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), *sys.argv[1:], "kagent"]
    return subprocess.run(command, cwd=TREE).returncode


if __name__ == "__main__":
    sys.exit(main())
