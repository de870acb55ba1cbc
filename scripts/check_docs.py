#!/usr/bin/env python3
"""Checks that the README and docs/ are true of the repository (ctest: docs_paths, docs_commands).

  check_docs.py paths    [--root DIR] [--build DIR] [FILE.md ...]
  check_docs.py commands [--root DIR] --build DIR [--slow] [--list] [--timeout S] [FILE.md ...]

Without files: README.md and every docs/**/*.md under --root (default: this script's repository).

paths: every repository path a document writes must exist. A path is a word of inline code or of
a fenced block, or a link target, that starts with a top-level folder of the repository
(`src/...`, `docs/img/x.png`, `data/philly_jobs.csv`), names a header the way code includes it
(`edp/elastic/job.h`, `train/checkpoint.h`: looked for under include/edp/ and src/), or is a
relative link (resolved against the document's folder). `<name>` and `*` match any file name part,
`{a,b}` expands, `...` at the end is dropped. `build/<dir>/...` paths (built programs) are checked
in --build when it has that folder. A path that climbs out of the repository (`../x`) in inline
code or a link is reported too: a clone does not have it.

paths also rejects paths of the machine a document was written on: a home or work folder
(`/home/<user>/...`, `/root/...`, `/work/...`) or the repository's own absolute path, in text or
blocks (docs are reference: real output, with such paths replaced by what a reader has).

paths also checks the blocks marked `<!-- file: PATH -->` (the previous non-blank line before a
fence): such a block must be PATH's text exactly (the README's programs are the files the tests
build).

commands: runs the shell blocks marked runnable. A marked block is a ```sh fence whose previous
non-blank line is the HTML comment `<!-- runnable -->` (run by the test) or
`<!-- runnable slow -->` (run only with --slow). Each block runs with `bash -e -o pipefail` in a
fresh directory that looks like a clone after `scripts/build.sh`: every top-level entry git tracks
linked in, and `build` linked to --build. So a block is written exactly as a user types
it at the repository root; what it writes stays in that directory, which is removed afterwards.
Exit status: 0 when all is well, 1 when something is broken (each finding on one line,
FILE:LINE: ...), 2 on a usage error.
"""
import argparse
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TOP_DIRS = ("include", "src", "tests", "tools", "docs", "scripts", "bench", "examples", "kernels",
            "cmake", "data", ".ci")
BUILD_DIRS = ("examples", "tools", "bench", "tests")
MACHINE_PATH = re.compile(r"(?:^|[^\w.~$-])(/(?:work|root|home/[^/\s`]+)/\S*)")
CODE_EXT = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".py", ".sh", ".cmake", ".md", ".png", ".csv", ".txt")
MARK = re.compile(r"^\s*<!--\s*runnable(\s+slow)?\s*-->\s*$")
MARK_FILE = re.compile(r"^\s*<!--\s*file:\s*(\S+)\s*-->\s*$")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")


def default_files(root):
    files = [os.path.join(root, "README.md")]
    for d, _, names in sorted(os.walk(os.path.join(root, "docs"))):
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def blocks_and_text(lines):
    """Yields (line number, text, kind) with kind 'fence' for fenced-block lines, else 'text'."""
    fence = None
    for i, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None and line.strip().startswith(fence[0] * len(fence)) and line.strip().strip(fence[0]) == "":
            fence = None
            continue
        yield i, line, "fence" if fence is not None else "text"


def expand_braces(p):
    m = re.search(r"\{([^{}]*,[^{}]*)\}", p)
    if not m:
        return [p]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(p[:m.start()] + alt + p[m.end():])
    return out


def to_glob(p):
    p = re.sub(r"<[^<>/]*>", "*", p)
    return p


def matches(base, rel):
    """True when rel (a path with * wildcards) names something under base."""
    import glob
    rel = rel.rstrip("/") or "."
    if "*" in rel:
        return bool(glob.glob(os.path.join(base, rel)))
    return os.path.exists(os.path.join(base, rel))


def builds_anything(d):
    """True when build directory d holds a program or library (not only CMake's own files)."""
    if not os.path.isdir(d):
        return False
    for name in os.listdir(d):
        f = os.path.join(d, name)
        if os.path.isfile(f) and (os.access(f, os.X_OK) or name.endswith((".a", ".so"))):
            return True
    return False


def header_exists(root, rel):
    """rel as an #include names it: under include/, include/edp/, src/, kernels/ or examples/; edp/config.h is
    generated from cmake/config.h.in."""
    if any(matches(os.path.join(root, b), rel) for b in ("include", "include/edp", "src", "kernels", "examples")):
        return True
    return os.path.exists(os.path.join(root, "cmake", os.path.basename(rel) + ".in"))


def clean_word(w):
    prev = None
    while w != prev:
        prev = w
        w = w.strip("`'\",;:()[]")
        w = re.sub(r"(\.\.\.|…)$", "", w)
        w = re.sub(r":\d+(:\d+)?$", "", w)  # file:line
        w = w.rstrip(".,;:")
    return w


def check_word(w, doc, root, build, in_fence):
    """Returns None when w is fine or no repository path, else the reason it is broken."""
    if not w or "://" in w or w.startswith(("/", "$", "~", "-")) or "=" in w:
        return None
    if w in ("..", "../"):
        return None
    if w.startswith("../"):
        if in_fence:
            return None  # output and commands run from elsewhere (e.g. build/tc)
        return "climbs out of the repository (a clone has no %s)" % w
    w = w[2:] if w.startswith("./") else w
    first = w.split("/", 1)[0]
    for cand in expand_braces(w):
        cand = to_glob(cand)
        if first == "build" and "/" in cand:
            sub = cand.split("/")[1]
            if sub not in BUILD_DIRS or build is None or not os.path.isdir(os.path.join(build, sub)):
                continue
            rel = cand.split("/", 1)[1]
            if not matches(build, rel):
                if not builds_anything(os.path.join(build, os.path.dirname(rel))):
                    continue  # a directory this build configured and built nothing in (e.g. CUDA off)
                return "%s is not in the build (%s)" % (cand, build)
            continue
        if first in TOP_DIRS and "/" in cand:
            if not matches(root, cand) and not (cand.endswith((".h", ".cuh")) and header_exists(root, cand)):
                return "%s does not exist" % cand
            continue
        if cand in ("README.md", "CMakeLists.txt"):
            continue
        # A header named as code includes it: edp/x/y.h, train/checkpoint.h.
        if "/" in cand and cand.endswith((".h", ".cuh")) and not in_fence and not header_exists(root, cand):
            return "%s is in neither include/, include/edp/ nor src/" % cand
    return None


def check_paths(files, root, build):
    problems = []
    for f in files:
        rel = os.path.relpath(f, root)
        lines = open(f, encoding="utf-8").read().split("\n")
        for n, line, kind in blocks_and_text(lines):
            words = []
            if kind == "fence":
                words = line.split()
            else:
                for m in re.finditer(r"`([^`]+)`", line):
                    words += m.group(1).split()
                for m in re.finditer(r"\]\(([^)\s#]+)(#[^)]*)?\)", line):
                    target = m.group(1)
                    if "://" in target or target.startswith("mailto:"):
                        continue
                    full = os.path.normpath(os.path.join(os.path.dirname(f), target))
                    if not full.startswith(os.path.abspath(root) + os.sep):
                        problems.append("%s:%d: link %s climbs out of the repository" % (rel, n, target))
                    elif not os.path.exists(full):
                        problems.append("%s:%d: link %s: %s does not exist" % (rel, n, target, os.path.relpath(full, root)))
            for w in words:
                why = check_word(clean_word(w), f, root, build, kind == "fence")
                if why:
                    problems.append("%s:%d: %s" % (rel, n, why))
            m = MACHINE_PATH.search(line)
            here = os.path.abspath(root) + os.sep
            if m or here in line:
                problems.append("%s:%d: a path of the machine that wrote it (%s): docs carry paths a reader has" % (
                    rel, n, m.group(1) if m else here))
    return problems


def marked_blocks(f, mark):
    """[(line of the marker, line of the fence, match, fence's language, text)] of the fenced blocks
    right after a line matching mark (blank lines between are allowed)."""
    lines = open(f, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = mark.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            fm = FENCE.match(lines[j]) if j < len(lines) else None
            if not fm:
                out.append((i + 1, None, m, None, None))
                i += 1
                continue
            k = j + 1
            while k < len(lines) and not lines[k].strip().startswith(fm.group(1)):
                k += 1
            out.append((i + 1, j + 1, m, fm.group(2), "\n".join(lines[j + 1:k])))
            i = k
        i += 1
    return out


def check_file_copies(files, root):
    """A block after <!-- file: PATH --> must be PATH's text, exactly."""
    problems = []
    for f in files:
        rel = os.path.relpath(f, root)
        for mline, fline, m, _, text in marked_blocks(f, MARK_FILE):
            if fline is None:
                problems.append("%s:%d: <!-- file: --> must come right before a fenced block" % (rel, mline))
                continue
            path = os.path.join(root, m.group(1))
            if not os.path.isfile(path):
                problems.append("%s:%d: %s does not exist" % (rel, fline, m.group(1)))
                continue
            want = open(path, encoding="utf-8").read().rstrip("\n").split("\n")
            got = text.split("\n")
            if got != want:
                n = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                problems.append("%s:%d: the block is not %s: they differ at its line %d (%r vs %r)" % (
                    rel, fline + 1 + n, m.group(1), n + 1, got[n] if n < len(got) else "<end>",
                    want[n] if n < len(want) else "<end>"))
    return problems


def runnable_blocks(f):
    """[(line of the fence, slow, text)] of the blocks marked runnable in f."""
    out = []
    for mline, fline, m, lang, text in marked_blocks(f, MARK):
        if fline is None or lang not in ("sh", "bash", "shell"):
            raise SystemExit("%s:%d: <!-- runnable --> must come right before a ```sh block" % (f, mline))
        out.append((fline, bool(m.group(1)), text))
    return out


def fake_clone(root, build, where):
    """Links into `where` what a clone of root has at its top (git's tracked entries when root is a
    work tree, so that a block's output never lands in the real tree's out/ or build/), and build."""
    def git(*args):
        return subprocess.run(["git", "-C", root] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=True).stdout.decode()
    try:
        if os.path.realpath(git("rev-parse", "--show-toplevel").strip()) != os.path.realpath(root):
            raise OSError("not the top of a work tree")
        names = sorted({p.split("/", 1)[0] for p in git("ls-files", "-z").split("\0") if p})
    except (OSError, subprocess.CalledProcessError):
        names = os.listdir(root)
    for name in names:
        if name in (".git", "build") or not os.path.exists(os.path.join(root, name)):
            continue
        os.symlink(os.path.join(root, name), os.path.join(where, name))
    os.symlink(os.path.abspath(build), os.path.join(where, "build"))


def run_commands(files, root, build, slow, timeout, list_only):
    problems, ran = [], 0
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    for f in files:
        rel = os.path.relpath(f, root)
        for line, is_slow, text in runnable_blocks(f):
            tag = "%s:%d%s" % (rel, line, " (slow)" if is_slow else "")
            if list_only:
                print("%s\n%s\n" % (tag, text))
                continue
            if is_slow and not slow:
                print("%s: slow, not run (--slow runs it)" % tag)
                continue
            work = tempfile.mkdtemp(prefix="edp-doc-")
            try:
                fake_clone(root, build, work)
                t0 = time.time()
                # Its own process group, so that a block that runs too long goes with everything
                # it started (mpirun, ranks, a controller).
                p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", text], cwd=work, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
                try:
                    out, _ = p.communicate(timeout=timeout * (6 if is_slow else 1))
                    rc = p.returncode
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    out, _ = p.communicate()
                    rc = "timeout after %d s" % (timeout * (6 if is_slow else 1))
                out = out.decode(errors="replace")
                ran += 1
                print("%s: exit %s in %.1f s" % (tag, rc, time.time() - t0))
                if rc != 0:
                    tail = "\n".join(out.rstrip().split("\n")[-25:])
                    problems.append("%s: the block failed (exit %s):\n%s\n--- its last output lines:\n%s" % (tag, rc, text, tail))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return problems, ran


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["paths", "commands"])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--build", help="the build directory (commands: required)")
    ap.add_argument("--slow", action="store_true", help="also run the blocks marked <!-- runnable slow -->")
    ap.add_argument("--list", action="store_true", help="print the runnable blocks, run nothing")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per block (a slow one: 6 times that)")
    a = ap.parse_intermixed_args()
    root = os.path.abspath(a.root)
    files = [os.path.abspath(f) for f in a.files] or default_files(root)
    if a.what == "paths":
        problems = check_paths(files, root, os.path.abspath(a.build) if a.build else None)
        problems += check_file_copies(files, root)
        for p in problems:
            print(p)
        print("check_docs paths: %d file(s), %d broken path(s)" % (len(files), len(problems)))
        return 1 if problems else 0
    if not a.build and not a.list:
        ap.error("commands needs --build DIR")
    problems, ran = run_commands(files, root, a.build, a.slow, a.timeout, a.list)
    for p in problems:
        print(p)
    if not a.list:
        print("check_docs commands: %d block(s) run, %d failed" % (ran, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
