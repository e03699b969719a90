#!/usr/bin/env bash
# Ray for the lent GPU machines, whose image has none: the wheel for their Python (3.12),
# without Ray's Java jars (ray/jars, 32 MB of 79: kagent's members are Python tasks) so that
# it fits in a call's 64 MiB, and the packages Ray needs that the image lacks (jsonschema
# and what it needs). Into DEST, for lab/scripts/gpu_sweep_multi.sh:
#
#   bash lab/scripts/stage_wheels.sh && bash lab/scripts/ray_wheels_for_device.sh .whl
set -euo pipefail
dest=${1:?usage: lab/scripts/ray_wheels_for_device.sh DEST}
ray_version=${RAY_VERSION:-2.60.0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$tmp" "ray==$ray_version" jsonschema jsonschema-specifications referencing rpds-py
mkdir -p "$dest"
python3 - "$tmp" "$dest" <<'EOF'
import sys, zipfile
from pathlib import Path

source, dest = Path(sys.argv[1]), Path(sys.argv[2])
for wheel in sorted(source.glob("*.whl")):
    if not wheel.name.startswith("ray-"):
        (dest / wheel.name).write_bytes(wheel.read_bytes())
        continue
    with zipfile.ZipFile(wheel) as whole, zipfile.ZipFile(dest / wheel.name, "w", zipfile.ZIP_DEFLATED) as trimmed:
        for item in whole.infolist():
            if item.filename.startswith("ray/jars/"):
                continue
            data = whole.read(item)
            if item.filename.endswith(".dist-info/RECORD"):  # the files it lists are the ones it holds
                data = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(b"ray/jars/"))
            trimmed.writestr(item, data)
for wheel in sorted(dest.glob("*.whl")):
    print(f"{wheel.stat().st_size / 1e6:6.1f} MB  {wheel.name}")
EOF
