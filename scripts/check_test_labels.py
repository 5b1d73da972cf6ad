#!/usr/bin/env python3
"""Fails when a ctest test does not say what kind of test it is.

Every test must carry exactly one kind label (unit, integration, reliability,
deploy, bench) and may carry extra ones (gpu, oracle, fuzz, cli); no other
labels. The lists come from CMakeLists.txt (MOESPLIT_TEST_KINDS,
MOESPLIT_TEST_EXTRA_LABELS), which registers this script as the ctest test
test_labels.

Usage: check_test_labels.py CTEST BUILD_DIR KINDS EXTRA
  KINDS and EXTRA are ';'-separated (CMake lists). Exits 1 naming the tests
  that break the rule (a gtest binary that is not built shows up as
  <target>_NOT_BUILT, without labels: build everything first).
"""
import json
import subprocess
import sys


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    ctest, build_dir = argv[1], argv[2]
    kinds = set(filter(None, argv[3].split(";")))
    extra = set(filter(None, argv[4].split(";")))
    listing = subprocess.run([ctest, "--test-dir", build_dir, "--show-only=json-v1"],
                             check=True, capture_output=True, text=True).stdout
    tests = json.loads(listing)["tests"]
    problems = []
    counts = {}
    for t in tests:
        labels = []
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                labels = p["value"]
        for label in labels:
            counts[label] = counts.get(label, 0) + 1
        own_kinds = [l for l in labels if l in kinds]
        unknown = [l for l in labels if l not in kinds and l not in extra]
        if not own_kinds:
            problems.append(f"{t['name']}: no kind label (one of {', '.join(sorted(kinds))})"
                            f"; labels: {labels or 'none'}")
        elif len(own_kinds) > 1:
            problems.append(f"{t['name']}: {len(own_kinds)} kind labels {own_kinds}")
        if unknown:
            problems.append(f"{t['name']}: unknown labels {unknown}")
    print(f"{len(tests)} tests; per label: " +
          ", ".join(f"{k} {counts[k]}" for k in sorted(counts)))
    if problems:
        print(f"{len(problems)} problems:")
        for p in problems:
            print("  " + p)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
