#!/usr/bin/env python3
"""Checks that a crate's folders are layers: no module imports a module of a higher layer,
and no two modules import each other, directly or round a longer circle.

An import is any `crate::` path in a module's code outside its `#[cfg(test)] mod tests`
(doc links count too: a link upward is a reader sent the wrong way). Usage:

    scripts/check-layers.py            # e4-fs
    scripts/check-layers.py e4-fs -v   # and print every import between modules

Exits 1 and names each offending import when a rule is broken.
"""
import os
import re
import sys

# Each crate's layers, lowest first. A module's layer is its top folder (or its file, at
# the crate's root); modules on one line are peers, which may import each other as long
# as no circle forms.
LAYERS = {
    "e4-fs": [
        ["error", "time"],
        ["io"],
        ["buffer"],
        ["map", "xattr"],
        ["dir"],
        ["inode", "names", "space"],
        ["txn"],
        ["filesystem"],
        ["ops"],
        ["lib"],
    ],
}


def modules(root):
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            found["::".join(parts)] = path
    return found


def imports(mods):
    edges = {}
    for module, path in mods.items():
        source = open(path).read().split("#[cfg(test)]\nmod tests")[0]
        targets = set()
        for found in re.findall(r"crate::((?:[a-z_0-9]+::)*[a-z_0-9]+)", source):
            parts = found.split("::")
            while parts and "::".join(parts) not in mods:
                parts.pop()
            target = "::".join(parts)
            if target and target != module and not module.startswith(target + "::") \
                    and not target.startswith(module + "::"):
                targets.add(target)
        edges[module] = targets
    return edges


def circles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def check(crate, layers, verbose):
    root = os.path.join(os.path.dirname(__file__), "..", "crates", crate, "src")
    mods = modules(root)
    edges = imports(mods)
    rank = {top: i for i, line in enumerate(layers) for top in line}
    problems = []
    for module, targets in sorted(edges.items()):
        top = module.split("::")[0]
        if top not in rank:
            problems.append(f"{crate}: {module} is in no layer (add its folder to LAYERS)")
            continue
        for target in sorted(targets):
            if verbose:
                print(f"{crate}: {module} -> {target}")
            if rank.get(target.split("::")[0], -1) > rank[top]:
                problems.append(f"{crate}: {module} imports {target}, a higher layer")
    for circle in circles(edges):
        problems.append(f"{crate}: import circle: {' -> '.join(circle)}")
    return problems


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    verbose = "-v" in sys.argv
    crates = args or ["e4-fs"]
    problems = []
    for crate in crates:
        problems += check(crate, LAYERS[crate], verbose)
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"{', '.join(crates)}: layers hold, no import circles")


if __name__ == "__main__":
    main()
