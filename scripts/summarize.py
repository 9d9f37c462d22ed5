#!/usr/bin/env python3
"""Sum the results of every suite of every build into one closing line,
'N passed, M failed, K skipped'.

Usage: summarize.py BUILDDIR...

Unit tests count each Check test case (from Check's 'Checks: N, Failures:
F, Errors: E' line), e2e counts each pytest case (from the JUnit XML the
e2e suite writes to meson-logs/e2e-junit.xml), anything else counts one
per meson test.  A suite that crashed before printing its counts counts
as one failure.
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

CHECK_RE = re.compile(r"Checks: (\d+), Failures: (\d+), Errors: (\d+)")


def junit_counts(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    t = f = s = 0
    for su in suites:
        t += int(su.get("tests", 0))
        f += int(su.get("failures", 0)) + int(su.get("errors", 0))
        s += int(su.get("skipped", 0))
    return t - f - s, f, s


def build_counts(builddir):
    passed = failed = skipped = 0
    log = os.path.join(builddir, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        return 0, 1, 0, [f"{builddir}: no test log"]
    notes = []
    with open(log) as fh:
        entries = [json.loads(line) for line in fh if line.strip()]
    for e in entries:
        # meson 1.0 names a test "project:suite / name" and has no "suite" key
        suites = " ".join(e.get("suite", [])) or e.get("name", "").split(" / ")[0]
        result = e.get("result")
        out = e.get("stdout") or ""
        if result == "SKIP":
            skipped += 1
            continue
        if ":e2e" in suites:
            junit = os.path.join(builddir, "meson-logs", "e2e-junit.xml")
            if os.path.exists(junit):
                p, f, s = junit_counts(junit)
                passed, failed, skipped = passed + p, failed + f, skipped + s
                if result != "OK" and f == 0:
                    failed += 1
                    notes.append(f"{builddir}: e2e exited {result} with no failed case")
            else:
                failed += 1
                notes.append(f"{builddir}: e2e wrote no JUnit file")
            continue
        m = CHECK_RE.findall(out)
        if ":unit" in suites and m:
            n, f, err = (int(x) for x in m[-1])
            passed += n - f - err
            failed += f + err
            if result != "OK" and f + err == 0:
                failed += 1
            continue
        if result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        else:
            failed += 1
            notes.append(f"{builddir}: {e.get('name')} {result}")
    return passed, failed, skipped, notes


def main():
    total = [0, 0, 0]
    for b in sys.argv[1:]:
        p, f, s, notes = build_counts(b)
        for n in notes:
            print("  " + n)
        print(f"{b}: {p} passed, {f} failed, {s} skipped")
        total = [total[0] + p, total[1] + f, total[2] + s]
    # The last line is what CI reads: exactly "N passed, M failed".
    print(f"{total[2]} skipped")
    print(f"{total[0]} passed, {total[1]} failed")
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main())
