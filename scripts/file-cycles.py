#!/usr/bin/env python3
"""Finds import circles between the files of one module folder (a.rs uses b.rs, which uses
a.rs, possibly through others), in each source tree given (default: src and shaders/src).

A file uses a sibling when it names it (`super::b::X`, `crate::m::b::X`, `use super::{b, ..}`)
or names an item that the folder's mod.rs re-exports from it (`super::X` where mod.rs has
`pub use b::X`). mod.rs itself is not a node: it declares and re-exports its children.
Comments do not count. Exits 1 and prints each circle if there is one.
"""

import re
import sys
from pathlib import Path

ITEM = re.compile(r"\b(super|crate(?:::[a-z_0-9]+)*)::(\{[^}]*\}|[A-Za-z_0-9]+(?:::[A-Za-z_0-9]+)*)")


def code_of(path: Path) -> str:
    lines = [l for l in path.read_text().splitlines() if not l.lstrip().startswith("//")]
    return "\n".join(lines)


def reexports(mod_rs: Path) -> dict:
    """Names mod.rs re-exports, mapped to the child they come from."""
    out = {}
    if not mod_rs.exists():
        return out
    for m in re.finditer(r"pub(?:\([a-z]+\))? use ([a-z_0-9]+)::(\{[^}]*\}|[A-Za-z_0-9]+)", code_of(mod_rs)):
        child, names = m.group(1), m.group(2).strip("{}")
        for name in names.split(","):
            name = name.strip().split(" as ")[-1].strip()
            if name:
                out[name] = child
    return out


def folders(root: Path):
    """(folder, module path from the crate root, [(stem, path)]) for every module folder."""
    for mod_rs in [root / "lib.rs", *root.rglob("mod.rs"), *root.rglob("*.rs")]:
        if mod_rs.name == "mod.rs" or mod_rs.name == "lib.rs":
            folder = mod_rs.parent
        else:
            folder = mod_rs.with_suffix("")  # a.rs with an a/ folder beside it
            if not folder.is_dir():
                continue
        rel = folder.relative_to(root)
        module = [] if str(rel) == "." else list(rel.parts)
        files = [(p.stem, p) for p in sorted(folder.glob("*.rs")) if p.name not in ("mod.rs", "lib.rs", "main.rs")]
        yield folder, module, mod_rs, files


def edges_of(module, mod_rs, files):
    stems = {stem for stem, _ in files}
    exported = reexports(mod_rs)
    edges = {stem: set() for stem in stems}
    prefix = "crate" + "".join("::" + m for m in module)
    for stem, path in files:
        for m in ITEM.finditer(code_of(path)):
            base, rest = m.group(1), m.group(2)
            if base == "super" or base == prefix:
                heads = [p.strip().split("::")[0] for p in rest.strip("{}").split(",")]
            elif base.startswith(prefix + "::"):
                heads = [base[len(prefix) + 2:].split("::")[0]]
            else:
                continue
            for head in heads:
                head = head.strip()
                target = head if head in stems else exported.get(head)
                if target and target != stem and target in stems:
                    edges[stem].add(target)
    return edges


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
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
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(roots):
    found = []
    for root in map(Path, roots):
        seen = set()
        for folder, module, mod_rs, files in folders(root):
            if folder in seen:
                continue
            seen.add(folder)
            edges = edges_of(module, mod_rs, files)
            for comp in cycles(edges):
                names = ", ".join(f"{c}.rs" for c in comp)
                uses = "; ".join(f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp)
                found.append(f"file circle in {folder}: {names} ({uses})")
    for line in found:
        print(line)
    if found:
        return 1
    print(f"no circle between the files of a module folder ({', '.join(roots)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src", "shaders/src"]))
