#!/usr/bin/env python3
"""Tests of scripts/check_format.py on a generated tree: an unformatted source (random extra spaces and
line breaks in a random C++ function) is reported and fails the check, formatted ones and non-sources are
not, the check passes once the file is formatted, and a missing clang-format fails with a clear message."""
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "check_format.py")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(root, *extra):
    return subprocess.run([sys.executable, SCRIPT, "--root", root, *extra], capture_output=True, text=True)


def random_function(rng):
    name = "f" + "".join(rng.choice("abcxyz") for _ in range(6))
    terms = " + ".join(f"a * {rng.randint(1, 99)}" for _ in range(rng.randint(1, 4)))
    return f"int {name}(int a) {{\n  return {terms};\n}}\n"


def main():
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    print("seed", seed)
    if shutil.which("clang-format") is None:
        print("FAIL: clang-format is not installed (scripts/setup.sh installs it)")
        return 1
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(os.path.join(ROOT, ".clang-format"), d)
        for folder in ("src/a", "tests", "docs"):
            os.makedirs(os.path.join(d, folder))
        good = os.path.join(d, "src/a/good.cpp")
        with open(good, "w") as f:
            f.write(random_function(rng))
        subprocess.run(["clang-format", "-i", good], check=True)
        # Unformatted: the same kind of function with spaces doubled and a line break inside the expression.
        bad_rel = "tests/bad" + rng.choice([".cu", ".h", ".cpp"])
        bad = os.path.join(d, bad_rel)
        text = random_function(rng).replace(" ", "  ").replace("return", "return\n")
        with open(bad, "w") as f:
            f.write(text)
        # Not a source: never checked, whatever its layout.
        with open(os.path.join(d, "docs/notes.txt"), "w") as f:
            f.write(text)

        r = run(d)
        check(r.returncode == 1, f"an unformatted file fails the check (rc {r.returncode})")
        check(bad_rel in r.stdout, f"the unformatted file is named: {r.stdout!r}")
        check("good.cpp" not in r.stdout.split("fix with")[0].split("unformatted")[-1],
              "the formatted file is not reported")
        check("notes.txt" not in r.stdout, "a non-source file is not checked")
        check("2 files, 1 unformatted" in r.stdout, f"counts: {r.stdout!r}")

        subprocess.run(["clang-format", "-i", bad], check=True)
        r = run(d)
        check(r.returncode == 0, f"the check passes once formatted (rc {r.returncode}, {r.stdout!r})")

        r = run(d, "--clang-format", "no-such-clang-format-" + str(seed))
        check(r.returncode == 1 and "not found" in r.stderr, f"a missing clang-format is an error: {r.stderr!r}")
    print("check_format_test:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
