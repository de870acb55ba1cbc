#!/usr/bin/env python3
"""Checks that every #include in edp's library code goes down the layer order, never up.

The layers (cmake/EdpLayers.cmake, docs/architecture.md) are, bottom to top:
core, cuda, backend, nn, optim, comm, ddp, data, train, elastic, launch, autoscale.
A file belongs to the layer of its folder: include/edp/<layer>/, src/<layer>/; kernels/ is the
cuda layer. It may include its own layer and the ones below; an include of a higher layer, an
include that climbs out of its folder with "../", or a private header of another layer reached
by a path the build's include views do not provide, is reported as FILE:LINE with the rule it
breaks. Exit status 1 if anything is reported. The build enforces the same rule (an upward
include fails to compile); this check names the line and also sees code that is compiled only
with CUDA.

Usage: scripts/check_layers.py [--graph] [ROOT]   (default: the repository this script is in)
  --graph   also print each layer's direct uses, as found (for docs/architecture.md)
"""
import os
import re
import sys

LAYERS = ["core", "cuda", "backend", "nn", "optim", "comm", "ddp", "data", "train", "elastic",
          "launch", "autoscale"]
RANK = {name: i for i, name in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
EXTS = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def layer_of(rel):
    parts = rel.split("/")
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "edp":
        return parts[2] if parts[2] in RANK else None
    if parts[0] == "src" and len(parts) > 1:
        return parts[1] if parts[1] in RANK else None
    if parts[0] == "kernels":
        return "cuda"
    return None


def target_layer(inc, rel, root):
    """The layer an include names, or None for edp/config.h and headers of the same folder."""
    parts = inc.split("/")
    if inc == "edp/config.h":
        return None, None
    if parts[0] == "edp" and len(parts) > 1:
        if parts[1] in RANK:
            return parts[1], None
        return None, "names edp/%s, which is no layer" % parts[1]
    if parts[0] == "kernels":
        return "cuda", None
    if parts[0] in RANK and len(parts) > 1:
        return parts[0], None
    if ".." in parts:
        return None, 'climbs out of its folder ("../"): include by layer path instead'
    # A header next to the including file (quote includes look there first).
    here = os.path.join(root, os.path.dirname(rel), inc)
    if os.path.exists(here):
        return None, None
    return None, "is not a header of any layer (and not next to the file)"


EDGES = {}


def check(root):
    problems = []
    for top in ("include/edp", "src", "kernels"):
        base = os.path.join(root, top)
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if not f.endswith(EXTS):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                own = layer_of(rel)
                if own is None:
                    if top != "include/edp" or f != "edp.h":
                        problems.append("%s: is in no layer's folder (%s)" % (rel, ", ".join(LAYERS)))
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        tgt, why = target_layer(inc, rel, root)
                        if why:
                            problems.append('%s:%d: #include "%s" %s' % (rel, n, inc, why))
                        if tgt is not None and tgt != own:
                            EDGES.setdefault(own, set()).add(tgt)
                        if tgt is not None and RANK[tgt] > RANK[own]:
                            problems.append(
                                '%s:%d: #include "%s": layer %s may not use layer %s above it '
                                '(order: %s)' % (rel, n, inc, own, tgt, " < ".join(LAYERS)))
    return problems


def check_umbrella(root):
    """Every public header is included by edp/edp.h or named in its "Not included" comment."""
    umbrella = os.path.join(root, "include/edp/edp.h")
    if not os.path.exists(umbrella):
        return []
    text = open(umbrella, encoding="utf-8").read()
    listed = set(re.findall(r'#include "(edp/[^"]+)"', text))
    listed |= set(re.findall(r'^//\s+(edp/\S+\.h)', text, re.M))
    problems = []
    base = os.path.join(root, "include")
    for dirpath, _, files in os.walk(os.path.join(base, "edp")):
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(dirpath, f), base)
            if f.endswith(".h") and rel != "edp/edp.h" and rel not in listed:
                problems.append("include/edp/edp.h: neither includes nor lists %s (add it to one)" % rel)
    return problems


def main():
    args = sys.argv[1:]
    graph = "--graph" in args
    args = [a for a in args if a != "--graph"]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root) + check_umbrella(root)
    if graph:
        for layer in reversed(LAYERS):
            uses = sorted(EDGES.get(layer, ()), key=RANK.get, reverse=True)
            print("%-10s -> %s" % (layer, ", ".join(uses) if uses else "(nothing)"))
    for p in problems:
        print(p)
    if problems:
        print("check_layers: %d problem(s): see above" % len(problems))
        return 1
    print("check_layers: every include goes down the layer order (%s)" % " < ".join(LAYERS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
