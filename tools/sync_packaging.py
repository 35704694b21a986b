#!/usr/bin/env python3
"""Keeps the packaging facts shared by every hvd distribution in one place.

The repository's `VERSION` file is the one version of hvd. This tool writes it
into each packages/*/pyproject.toml (and hvd-core's CMake project), pins the
sibling requirements to the same minor release (`hvd-core>=0.1,<0.2` while
VERSION is 0.1.x), and copies the root LICENSE and NOTICE into each package
folder, because a wheel or sdist can only ship files from inside its own
project folder.

Usage (from anywhere):
  python tools/sync_packaging.py            # rewrite the files that differ
  python tools/sync_packaging.py --check    # exit 1, listing them, if any differ

Release: edit VERSION, run this tool, commit.
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ["hvd-core", "hvd-launch", "hvd-torch", "hvd-tensorflow", "hvd-mxnet", "hvd-elastic"]
SIBLINGS = ["hvd-core", "hvd-launch"]
SHARED_FILES = ["LICENSE", "NOTICE"]


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def version():
    text = read(os.path.join(ROOT, "VERSION")).strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+([a-z]+\d+)?", text):
        sys.exit("VERSION: %r is not MAJOR.MINOR.PATCH[preN]" % text)
    return text


def minor_range(ver):
    major, minor = (int(x) for x in ver.split(".")[:2])
    return ">=%d.%d,<%d.%d" % (major, minor, major, minor + 1)


def expected_pyproject(text, ver):
    # [project] version, first match only (the table comes first in each file).
    text = re.sub(r'(?m)^version = "[^"]*"$', 'version = "%s"' % ver, text, count=1)
    spec = minor_range(ver)
    for name in SIBLINGS:
        # Only list items (indented lines), never `name = "..."`.
        text = re.sub(r'(?m)^(\s+)"%s(?:[<>=!~,.\d ]*)"' % re.escape(name), r'\g<1>"%s%s"' % (name, spec), text)
    return text


def expected_cmake(text, ver):
    return re.sub(r"project\(hvd_core VERSION [\d.]+", "project(hvd_core VERSION %s" % ver, text, count=1)


def planned():
    """Yield (path, wanted_content) for every file this tool owns."""
    ver = version()
    for pkg in PACKAGES:
        path = os.path.join(ROOT, "packages", pkg, "pyproject.toml")
        yield path, expected_pyproject(read(path), ver)
        for name in SHARED_FILES:
            yield os.path.join(ROOT, "packages", pkg, name), read(os.path.join(ROOT, name))
    path = os.path.join(ROOT, "packages", "hvd-core", "CMakeLists.txt")
    yield path, expected_cmake(read(path), ver)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files that differ")
    args = parser.parse_args(argv)
    stale = []
    for path, wanted in planned():
        current = read(path) if os.path.exists(path) else None
        if current == wanted:
            continue
        stale.append(os.path.relpath(path, ROOT))
        if not args.check:
            with open(path, "w", encoding="utf-8") as f:
                f.write(wanted)
    if args.check and stale:
        print("out of date with VERSION/LICENSE/NOTICE (run python tools/sync_packaging.py):")
        for path in stale:
            print("  " + path)
        return 1
    for path in stale:
        print("wrote " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
