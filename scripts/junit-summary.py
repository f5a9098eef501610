#!/usr/bin/env python3
"""Markdown summary of a `cargo gpurun test --junit` report, for a GitHub job's step summary.

    junit-summary.py REPORT.xml >>"$GITHUB_STEP_SUMMARY"

One row per suite (passed, failed, ignored), then each failed test with the first line of its
message. A missing or unreadable report is said in one line, with exit status 0: the test step
has already failed the job for that reason, and the summary must not hide it behind its own
error.
"""

import sys
import xml.etree.ElementTree as ElementTree

# A failure message longer than this is cut in the list of failures (the report has it whole).
MAX_MESSAGE = 200


def cell(text):
    """Text that cannot break a Markdown table row."""
    return text.replace("|", "\\|").replace("\n", " ")


def summarize(path):
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as error:
        return f"### cargo gpurun test\n\nNo test report at `{path}` ({error}).\n"
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    rows = []
    failures = []
    totals = [0, 0, 0]
    for suite in suites:
        name = suite.get("name", "?")
        passed = failed = ignored = 0
        for case in suite.findall("testcase"):
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is not None:
                failed += 1
                message = (failure.get("message") or "").strip().splitlines()
                first = message[0] if message else "failed"
                if len(first) > MAX_MESSAGE:
                    first = first[:MAX_MESSAGE] + "..."
                failures.append(f"- `{name}`: `{case.get('name', '?')}`: {cell(first)}")
            elif case.find("skipped") is not None:
                ignored += 1
            else:
                passed += 1
        totals = [totals[0] + passed, totals[1] + failed, totals[2] + ignored]
        rows.append(f"| {cell(name)} | {passed} | {failed} | {ignored} |")
    verdict = "failed" if totals[1] else "passed"
    lines = [
        f"### cargo gpurun test: {verdict}",
        "",
        f"{totals[0]} passed, {totals[1]} failed, {totals[2]} ignored in {len(suites)} suite(s).",
        "",
        "| suite | passed | failed | ignored |",
        "| --- | ---: | ---: | ---: |",
        *rows,
    ]
    if failures:
        lines += ["", "Failures:", "", *failures]
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) != 2:
        print("usage: junit-summary.py REPORT.xml", file=sys.stderr)
        return 2
    sys.stdout.write(summarize(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
