#!/usr/bin/env bash
# Mutation run over the configured scope ([tool.mutmut] in pyproject.toml) and its per-module
# table, read from mutmut's own results (mutants/**/*.meta).
#
#   scripts/mutation.sh                    run every mutant not yet checked, then the table
#   scripts/mutation.sh 'pytest_infercheck.verdict.*' ...
#                                          (re)run only the mutants matching these globs
#                                          (mutmut's names: package.module.x_function__mutmut_N)
#   scripts/mutation.sh --table            only print the table of the last runs
#   scripts/mutation.sh --survivors [GLOB] only list the surviving / untested mutants
#   scripts/mutation.sh --rerun-survivors [GLOB]
#                                          run again only the mutants that survived (or had
#                                          no test) in the last runs and that
#                                          tests/unit/MUTATION.md does not list: after adding
#                                          tests
#   scripts/mutation.sh --run-unchecked [GLOB]
#                                          run only the mutants not checked yet (new, or of
#                                          functions changed since their last run), of the
#                                          modules the globs name
#
# The machine is shared: mutmut runs under `nice -n 19` with one child (MUTMUT_CHILDREN to
# change it). Python: $PYTHON, else .venv/bin/python, else /work/main/.venv/bin/python.
#
# Rate = (killed + timeout) / (killed + timeout + survived + no tests): a mutant no test
# covers counts as a survivor; mutants caught by the type checker or skipped are left out.
# rate-net also leaves out the survivors tests/unit/MUTATION.md lists with a reason
# (equivalent or unobservable: column "listed").
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-}
if [[ -z "$PYTHON" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python
    else PYTHON=/work/main/.venv/bin/python; fi
fi
MUTMUT="$(dirname "$PYTHON")/mutmut"

table() {
    "$PYTHON" - "$@" <<'EOF'
import fnmatch
import json
import re
import sys
from collections import Counter
from pathlib import Path

STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
          36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout",
          None: "not checked", 34: "skipped", 37: "type check"}
mode, *globs = sys.argv[1:] or ["table"]


def listed_survivors() -> set[str]:
    """The mutants tests/unit/MUTATION.md lists (equivalent or unobservable, with why): in
    its table's second column, `x_f__mutmut_3`, `_5` (the same function), `_7`..`_9`."""
    path = Path("tests/unit/MUTATION.md")
    out: set[str] = set()
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4 or not cells[1].endswith(".py"):
            continue
        module = "pytest_infercheck." + cells[1][: -len(".py")].replace("/", ".")
        prefix = ""
        previous = None
        for token, gap in re.findall(r"`([^`]+)`(\.\.)?", cells[2]):
            if "__mutmut_" in token:
                prefix, number = token.rsplit("__mutmut_", 1)
            elif re.fullmatch(r"_\d+", token) and prefix:
                number = token[1:]
            else:
                continue
            n = int(number)
            if previous is not None:
                out.update(f"{module}.{prefix}__mutmut_{m}" for m in range(previous, n + 1))
            out.add(f"{module}.{prefix}__mutmut_{n}")
            previous = n if gap else None
    return out


LISTED = listed_survivors()
LISTED_FLAT = {name.replace("ǁ", ".") for name in LISTED}
rows = []
for meta in sorted(Path("mutants").glob("**/*.py.meta")):
    module = str(meta.relative_to("mutants"))[: -len(".meta")]
    codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
    if globs:
        codes = {k: v for k, v in codes.items() if any(fnmatch.fnmatch(k, g) for g in globs)}
    if not codes:
        continue
    if mode == "unchecked":
        for key, code in sorted(codes.items()):
            if code is None:
                print(f"unchecked  {key}")
        continue
    if mode in ("survivors", "unlisted"):
        for key, code in sorted(codes.items()):
            if STATUS.get(code, "suspicious") not in ("survived", "no tests", "suspicious"):
                continue
            if mode == "unlisted" and key.replace("ǁ", ".") in LISTED_FLAT:
                continue
            print(f"{STATUS.get(code, 'suspicious'):<10} {key}")
        continue
    c = Counter(STATUS.get(code, "suspicious") for code in codes.values())
    listed = sum(
        1
        for key, code in codes.items()
        if STATUS.get(code, "suspicious") in ("survived", "no tests", "suspicious")
        and key.replace("ǁ", ".") in LISTED_FLAT
    )
    dead = c["killed"] + c["timeout"]
    judged = dead + c["survived"] + c["no tests"] + c["suspicious"]
    rate = f"{100 * dead / judged:5.1f}%" if judged else "    -"
    net = f"{100 * dead / (judged - listed):5.1f}%" if judged > listed else "    -"
    rows.append((module, len(codes), c["killed"], c["survived"], c["no tests"], c["timeout"],
                 c["not checked"], listed, rate, net))
if mode == "table":
    head = ("module", "mutants", "killed", "survived", "no-tests", "timeout", "unchecked",
            "listed", "rate", "rate-net")
    width = max([len(head[0])] + [len(r[0]) for r in rows])
    print(f"{head[0]:<{width}} " + " ".join(f"{h:>9}" for h in head[1:]))
    total = Counter()
    for r in rows:
        print(f"{r[0]:<{width}} " + " ".join(f"{v:>9}" for v in r[1:]))
        for name, v in zip(head[1:8], r[1:8]):
            total[name] += v
    dead = total["killed"] + total["timeout"]
    judged = dead + total["survived"] + total["no-tests"]
    rate = f"{100 * dead / judged:5.1f}%" if judged else "-"
    net = f"{100 * dead / (judged - total['listed']):5.1f}%" if judged > total["listed"] else "-"
    print(f"{'total':<{width}} " + " ".join(f"{total[h]:>9}" for h in head[1:8])
          + f" {rate:>9} {net:>9}")
    print("rate = (killed + timeout) / (killed + timeout + survived + no-tests); rate-net leaves "
          "out the survivors tests/unit/MUTATION.md lists (listed) as equivalent/unobservable")
EOF
}

case "${1:-}" in
    --table) shift; table table "$@"; exit 0 ;;
    --survivors) shift; table survivors "$@"; exit 0 ;;
    --rerun-survivors|--run-unchecked)
        [[ "$1" == --rerun-survivors ]] && which=unlisted || which=unchecked
        shift
        mapfile -t names < <(table "$which" "$@" | awk '{print $NF}')
        if [[ ${#names[@]} -eq 0 ]]; then echo "nothing to run"; table table "$@"; exit 0; fi
        nice -n 19 "$MUTMUT" run --max-children "${MUTMUT_CHILDREN:-1}" "${names[@]}" || status=$?
        table table "$@"
        exit "${status:-0}"
        ;;
esac

if pgrep -f "\.ci/run" >/dev/null 2>&1; then
    echo "note: CI is running (.ci/run); mutmut runs niced, expect it slower" >&2
fi
nice -n 19 "$MUTMUT" run --max-children "${MUTMUT_CHILDREN:-1}" "$@" || status=$?
table table "$@"
exit "${status:-0}"
