#!/usr/bin/env bash
# The wheels a lent GPU machine needs to run kagent (its image has torch, triton, numpy, pyyaml,
# rich and typer, but no pydantic or GitPython), into .whl/ at the repository's root (ignored by
# git): kagent's own wheel, built from this checkout, and the pure or manylinux wheels of what
# the image lacks, for its Python (3.12, x86-64). lab/scripts/gpu_setup.sh installs them there.
#
#   bash lab/scripts/stage_wheels.sh        # then, through the device tool, carry [".whl"]
#
# The versions are those installed here (pip show), so the GPU side runs what the tests ran.
set -euo pipefail
cd "$(dirname "$0")/../.."
pinned=()
for name in pydantic pydantic_core annotated_types typing_inspection typing_extensions GitPython gitdb smmap; do
  version=$(python3 -m pip show "$name" 2>/dev/null | sed -n "s/^Version: //p" || true)
  [ -n "$version" ] || { echo "$name is not installed here: install kagent first (README)" >&2; exit 1; }
  pinned+=("$name==$version")
done
rm -rf .whl && mkdir -p .whl
python3 -m pip wheel -q --no-deps -w .whl .
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${pinned[@]}"
ls -l .whl
du -sh .whl
