#!/usr/bin/env python3
"""Checks docs/architecture.md's rule for reading JSON: every JSON text from outside the running
process goes through the strict reader (src/core/json_fields.h); nlohmann's parse is called
directly only where the same process has just made the text from its own values.

Reports every direct call of nlohmann's parse (json::parse, ordered_json::parse, and the
nlohmann:: spellings) in src/, include/, tools/ and examples/ outside the files ALLOWED names, as
FILE:LINE with the rule. Exit status 1 if anything is reported.

Usage: scripts/check_json_reads.py [ROOT]     (default: the repository this script is in)
       scripts/check_json_reads.py --self-test (a planted call is reported, an allowed one not)
"""
import os
import re
import sys
import tempfile

# The files that may call nlohmann's parse, and why (docs/architecture.md, "Reading JSON").
ALLOWED = {
    "src/core/json_fields.cpp": "the strict reader itself",
    "src/autoscale/job_table.cpp": "a job spec it has just written (job_spec_json), embedded in the job table",
    "tools/edp-autoscale/serve.cpp": "a job spec it has just written, embedded in the submit answer",
    "tools/edp-autoscale/simulate.cpp": "a simulation summary it has just written, embedded in the combined one",
    "src/core/timeline.cpp": "a timeline event's arguments, made by edp, parsed with exceptions off",
}
DIRS = ("src", "include", "tools", "examples")
EXTS = (".h", ".hpp", ".cpp", ".cu", ".cuh")
CALL = re.compile(r"\b(?:nlohmann::)?(?:ordered_)?json::parse\s*\(")


def check(root):
    problems = []
    for top in DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(EXTS):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                if rel in ALLOWED:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for no, line in enumerate(f, 1):
                        code = line.split("//", 1)[0]
                        if CALL.search(code):
                            problems.append(f"{rel}:{no}: nlohmann's parse called directly; read JSON from "
                                            "outside this process with json_fields (src/core/json_fields.h), "
                                            "docs/architecture.md \"Reading JSON: one rule\"")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "src/data"))
        os.makedirs(os.path.join(root, "src/core"))
        with open(os.path.join(root, "src/data/reader.cpp"), "w") as f:
            f.write("// json::parse(text) in a comment is fine\nauto j = nlohmann::json::parse(text);\n")
        with open(os.path.join(root, "src/core/json_fields.cpp"), "w") as f:
            f.write("auto j = json::parse(text);\n")
        got = check(root)
        if len(got) != 1 or not got[0].startswith("src/data/reader.cpp:2:"):
            print("self-test failed: expected one report at src/data/reader.cpp:2, got", got)
            return 1
    print("check_json_reads self-test: a planted call is reported, a comment and an allowed file are not")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for rel in ALLOWED:
        if not os.path.exists(os.path.join(root, rel)):
            print(f"check_json_reads: {rel} is allowed but does not exist (update ALLOWED)")
            return 1
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check_json_reads: {len(problems)} problem(s)")
        return 1
    print("check_json_reads: JSON from outside the process is read through json_fields only")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
