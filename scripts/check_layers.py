#!/usr/bin/env python3
"""Checks that the folders of src/ include each other only downwards (docs/ARCHITECTURE.md).

Reads every source file under src/ (cuda/ subfolders count as their parent folder), apps/, bench/ and
examples/, collects its project includes ("folder/file.h"), prints the include edges between folders
with their counts, then every upward edge with the lines that make it. Exits 1 when there is an upward
edge, an unknown folder or a library in CMakeLists.txt (fp4_area) whose view of src/ differs from
kAllowed below, 0 otherwise. Only the Python standard library is used, so CI can run it
before anything is built.

  scripts/check_layers.py [--root DIR] [--quiet]
"""

import argparse
import collections
import pathlib
import re
import sys

# What each folder may include besides itself: the layers, bottom first. A folder may include any
# folder below it on its path (the lists are closed under that).
kAllowed = {
    "core": set(),
    "numerics": {"core"},
    "tensor": {"core"},
    "recipe": {"core", "numerics"},
    "data": {"core"},
    "ops": {"core", "numerics", "tensor", "recipe"},
    "nn": {"core", "numerics", "tensor", "recipe", "ops"},
    "optim": {"core", "numerics", "tensor", "recipe", "ops", "nn"},
    "model": {"core", "numerics", "tensor", "recipe", "ops", "nn", "optim"},
    # The communicators need only the Communicator interface (core); engines use that interface alone.
    "dist": {"core"},
    "train": {"core", "numerics", "tensor", "recipe", "ops", "nn", "optim", "model", "data", "dist"},
    # The report reads a run's files and metrics through train's readers.
    "report": {"core", "numerics", "tensor", "recipe", "ops", "nn", "optim", "model", "data", "dist",
               "train"},
}
# Programs on top: they may include every folder of src/.
kTop = {"apps", "bench", "examples"}
kOrder = ["core", "numerics", "tensor", "recipe", "data", "ops", "nn", "optim", "model", "dist",
          "train", "report", "apps", "bench", "examples"]

kSourceSuffixes = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}
kInclude = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(root: pathlib.Path, path: pathlib.Path) -> str:
    rel = path.relative_to(root).parts
    return rel[1] if rel[0] == "src" else rel[0]


def included_folder(root: pathlib.Path, src: pathlib.Path, target: str):
    """The src/ folder a quoted include names, or None for a same-folder or non-project include."""
    first = target.split("/", 1)[0]
    if "/" in target and (root / "src" / first).is_dir() and (root / "src" / target).exists():
        return first
    if (src.parent / target).exists():
        return folder_of(root, (src.parent / target).resolve())
    return None


def cmake_layers(root: pathlib.Path):
    """Folder -> the folders its library sees, from the fp4_area(...) calls in CMakeLists.txt."""
    text = (root / "CMakeLists.txt").read_text()
    seen = {}
    folder_of_target = {}
    for m in re.finditer(r"fp4_area\((\w+)\s+FOLDER\s+(\w+)([^)]*)\)", text):
        target, folder, rest = m.groups()
        deps = re.search(r"DEPS\s+(.*)", rest, re.S)
        names = deps.group(1).split() if deps else []
        view = {folder}
        for d in names:
            if d in folder_of_target:
                view |= seen[folder_of_target[d]]
        folder_of_target[target] = folder
        seen[folder] = view
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent, type=pathlib.Path)
    ap.add_argument("--quiet", action="store_true", help="print only the upward edges")
    args = ap.parse_args()
    root = args.root.resolve()

    edges = collections.Counter()
    where = collections.defaultdict(list)
    unknown = set()
    for top in ["src", *sorted(kTop)]:
        base = root / top
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in kSourceSuffixes or not path.is_file():
                continue
            src_folder = folder_of(root, path)
            if src_folder not in kAllowed and src_folder not in kTop:
                unknown.add(src_folder)
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = kInclude.match(line)
                if not m:
                    continue
                dst = included_folder(root, path, m.group(1))
                if dst is None or dst == src_folder:
                    continue
                edges[(src_folder, dst)] += 1
                where[(src_folder, dst)].append(f"{path.relative_to(root)}:{n}: {m.group(1)}")

    def rank(f):
        return kOrder.index(f) if f in kOrder else len(kOrder)

    upward = [e for e in edges if e[0] not in kTop and e[1] not in kAllowed.get(e[0], set())]
    if not args.quiet:
        print(f"include edges between folders: {len(edges)} ({sum(edges.values())} includes)")
        for (a, b) in sorted(edges, key=lambda e: (rank(e[0]), rank(e[1]))):
            mark = "  UPWARD" if (a, b) in upward else ""
            print(f"  {a:>9} -> {b:<9} {edges[(a, b)]:4d}{mark}")
    print(f"upward edges: {len(upward)} ({sum(edges[e] for e in upward)} includes)")
    for e in sorted(upward, key=lambda e: (rank(e[0]), rank(e[1]))):
        print(f"  {e[0]} -> {e[1]}:")
        for w in where[e]:
            print(f"    {w}")
    mismatch = []
    if (root / "CMakeLists.txt").exists():
        for folder, view in sorted(cmake_layers(root).items()):
            rule = kAllowed.get(folder, set()) | {folder}
            if view != rule:
                mismatch.append(folder)
                print(f"CMakeLists.txt lets {folder} see {sorted(view - {folder})}, kAllowed says "
                      f"{sorted(rule - {folder})}: make the two agree", file=sys.stderr)
    for f in sorted(unknown):
        print(f"unknown folder src/{f}: add it to kAllowed in scripts/check_layers.py", file=sys.stderr)
    return 1 if upward or unknown or mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
