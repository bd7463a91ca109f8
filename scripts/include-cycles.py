#!/usr/bin/python3
"""Fails when the folders of apf include each other in a cycle.

Reads every `#include "..."` in pkg/, verify/, workloads/, include/ and
cmd/ and resolves it as the compiler does (the including file's folder, then
-Ipkg, -Iinclude, -I.; see CPPFLAGS_APF in the Makefile). Each file belongs
to a folder: pkg/<a> (with its subfolders: pkg/nn/cpu is pkg/nn), verify,
workloads/<w>, include/apf, cmd/apf. An include between two folders is an
edge a -> b; a cycle in that graph means neither folder can be understood,
built or trusted without the other, so the boundary between them is wrong.

    scripts/include-cycles.py [--root DIR] [--graph]

Exit 0 and a one-line summary when the graph is acyclic; exit 1 naming each
cycle, with the include line that makes each of its edges (file:line).
--graph prints every edge first.
"""
import argparse
import os
import re
import sys

# cmd/ too: an include from a package into cmd/apf closes a cycle.
SCAN = ("pkg", "verify", "workloads", "include", "cmd")
SEARCH = ("pkg", "include", ".")  # -Ipkg -Iinclude -I. in that order
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE = (".c", ".h", ".cu", ".cuh")


def folder_of(rel):
    """pkg/nn/cpu/fast.h -> pkg/nn; verify/x.c -> verify; None outside."""
    parts = rel.split("/")
    if parts[0] in ("pkg", "workloads", "include") and len(parts) > 2:
        return "/".join(parts[:2])
    if parts[0] == "verify" and len(parts) > 1:
        return "verify"
    if parts[0] == "cmd" and len(parts) > 2:
        return "/".join(parts[:2])
    return None


def resolve(root, src, name):
    for d in [os.path.dirname(src)] + list(SEARCH):
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None


def edges(root):
    """{(a, b): [(file, line, text)]} and a list of unresolved includes."""
    out, unresolved = {}, []
    for top in SCAN:
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(SOURCE):
                    continue
                src = os.path.relpath(os.path.join(dirpath, f), root)
                a = folder_of(src)
                with open(os.path.join(root, src), errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        dst = resolve(root, src, m.group(1))
                        if dst is None:
                            unresolved.append(f"{src}:{n}: {m.group(1)}")
                            continue
                        b = folder_of(dst)
                        if a and b and a != b:
                            out.setdefault((a, b), []).append(
                                (src, n, line.strip()))
    return out, unresolved


def cycles(graph):
    """Each strongly connected component of more than one folder (Tarjan),
    with the shortest cycle through its first folder, which names it."""
    nodes = sorted({x for e in graph for x in e})
    succ = {n: sorted(b for (a, b) in graph if a == n) for n in nodes}
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in nodes:
        if v not in index:
            strong(v)
    result = []
    for comp in sorted(comps):
        # Shortest path from comp[0] back to itself inside the component.
        start, members = comp[0], set(comp)
        prev, frontier = {start: None}, [start]
        found = None
        while frontier and not found:
            nxt = []
            for v in frontier:
                for w in succ[v]:
                    if w not in members:
                        continue
                    if w == start:
                        found = v
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found:
                    break
            frontier = nxt
        path = [start]
        v = found
        while v != start:
            path.insert(1, v)
            v = prev[v]
        result.append((comp, path + [start]))
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    graph, unresolved = edges(args.root)
    if args.graph:
        for (a, b), why in sorted(graph.items()):
            print(f"{a} -> {b}  ({why[0][0]}:{why[0][1]}"
                  f"{', +%d more' % (len(why) - 1) if len(why) > 1 else ''})")
    for u in unresolved:
        print(f"apf: include-cycles: {u}: not found (ignored)", file=sys.stderr)
    found = cycles(graph)
    if not found:
        print(f"no include cycle between folders "
              f"({len({x for e in graph for x in e})} folders, "
              f"{len(graph)} edges)")
        return 0
    for comp, path in found:
        print(f"include cycle: {' -> '.join(path)}"
              + (f"  (folders in the same knot: {', '.join(comp)})"
                 if len(comp) > len(path) - 1 else ""))
        for a, b in zip(path, path[1:]):
            for src, n, text in graph[(a, b)]:
                print(f"  {a} -> {b}: {src}:{n}: {text}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
