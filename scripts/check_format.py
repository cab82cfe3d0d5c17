#!/usr/bin/env python3
"""Checks that every C++ and CUDA source of the project is formatted as .clang-format says.

Walks src/, apps/, bench/, tests/ and examples/ under the root for .cpp, .h, .hpp, .cu and .cuh files, runs
`clang-format --dry-run -Werror` on each and prints the files that would change, with the command that fixes
them. Exits 1 when a file is unformatted or clang-format is missing (scripts/setup.sh installs it), 0
otherwise. Only the Python standard library is used, so CI runs it before anything is built.

  scripts/check_format.py [--root DIR] [--clang-format PROGRAM]
"""

import argparse
import pathlib
import shutil
import subprocess
import sys

FOLDERS = ("src", "apps", "bench", "tests", "examples")
EXTENSIONS = {".cpp", ".h", ".hpp", ".cu", ".cuh"}


def sources(root):
    for folder in FOLDERS:
        base = root / folder
        if base.is_dir():
            yield from sorted(p for p in base.rglob("*") if p.suffix in EXTENSIONS and p.is_file())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent, type=pathlib.Path)
    ap.add_argument("--clang-format", default="clang-format")
    args = ap.parse_args()
    program = shutil.which(args.clang_format)
    if program is None:
        print(f"check_format: '{args.clang_format}' not found (scripts/setup.sh installs clang-format)",
              file=sys.stderr)
        return 1
    if not (args.root / ".clang-format").is_file():
        print(f"check_format: no .clang-format in {args.root}", file=sys.stderr)
        return 1
    files = list(sources(args.root))
    bad = []
    # Batches keep the command line short and the check fast (one process per 50 files).
    for i in range(0, len(files), 50):
        batch = files[i:i + 50]
        r = subprocess.run([program, "--dry-run", "-Werror", *map(str, batch)], cwd=args.root,
                           capture_output=True, text=True)
        if r.returncode != 0:
            for f in batch:
                one = subprocess.run([program, "--dry-run", "-Werror", str(f)], cwd=args.root,
                                     capture_output=True, text=True)
                if one.returncode != 0:
                    bad.append(f.relative_to(args.root))
    print(f"check_format: {len(files)} files, {len(bad)} unformatted")
    for f in bad:
        print(f"  {f}")
    if bad:
        print("fix with: clang-format -i " + " ".join(map(str, bad)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
