#!/usr/bin/env bash
# The lower bounds of pyproject.toml, tested: a fresh venv with every dependency pinned to its
# lower bound (the pins generated from pyproject.toml by scripts/lower_bounds.py, never copied
# by hand) and torch 2.13.0, then the tests that lean on those dependencies: the model SDKs
# against loopback servers, the CLI (typer, rich), runs, traces and resume (pydantic,
# gitpython, pyyaml), the report's pages and charts (matplotlib, the report extra).
# Dependencies of dependencies resolve to their newest allowed versions.
#
#   scripts/check_lower_bounds.sh [pytest arguments]   (default: the subset below)
#
# torch is the exception: its lower bound (2.8) is for a CUDA memory-pool API that a CPU
# machine never calls, and 2.13.0 is the build this check and CI install.
# KAGENT_LOWER_VENV names the venv's folder (default: .venv-lower, made anew each time).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${KAGENT_LOWER_VENV:-.venv-lower}
rm -rf "$venv"
python3 -m venv "$venv"
. "$venv/bin/activate"
constraints="$venv/lower-bounds.txt"
python3 scripts/lower_bounds.py --except torch --extra test --extra report --extra ray --extra example-kernel >"$constraints"
echo "lower bounds under test:"; sed 's/^/  /' "$constraints"
pip install -q torch==2.13.0
pip install -q -c "$constraints" -e '.[test,report,ray,example-kernel]'
# pip keeps to the constraints or fails; printed so that a log says what ran.
echo "installed:"; pip list --format=freeze | grep -i -f <(cut -d= -f1 "$constraints"; echo torch) | sed 's/^/  /'
if [ $# -eq 0 ]; then
    # Each test here leans on a dependency at its lower bound; the harness's own tests (torch
    # and numpy) are left to the full suite. The kill-and-resume cases, the replays that run a
    # session again and the CLI's whole demo runs are left out too: they call nothing of the
    # dependencies that the quicker runs, resumes and replays kept here do not.
    set -- tests/test_models.py tests/test_packaging.py::test_every_dependency_has_a_lower_and_an_upper_bound_and_the_tested_version_is_within \
        tests/test_budget.py tests/test_workspace.py tests/test_views.py tests/test_runs_replay.py \
        tests/test_cli.py tests/test_run_cli.py tests/test_resume.py \
        tests/test_report.py::test_a_trace_alone_renders tests/test_report.py::test_a_long_run_folds_and_links_what_is_long \
        tests/test_report.py::test_the_long_run_files_budget_shows_the_best_and_the_latest_first \
        -k "not (killed_and_resumed or orphaned_call or replay_execute or demo_session or config_file_and_quiet)"
fi
pytest -q -p no:cacheprovider -n auto "$@"
