# config.py - where the installed hvd-core keeps libhvd_core.so, the C ABI
# headers and the CMake package config, for bindings (found through Python)
# and for native builds (the hvd-core-config command).
"""Build and load locations of hvd-core's native parts.

Installed layout (inside this package, see cmake/install.cmake)::

    horovod/common/lib/libhvd_core.so
    horovod/common/include/hvd/*.h
    horovod/common/lib/cmake/hvd_core/hvd_coreConfig.cmake

``HVD_CORE_LIBRARY`` (a path to a ``libhvd_core.so``) overrides the library
location, for developers running against an in-tree build.
"""

import argparse
import os
import sys

__all__ = ["get_library_path", "get_include_dir", "get_cmake_dir", "get_lib_dir", "main"]

LIBRARY_NAME = "libhvd_core.so"
LIBRARY_ENV_VAR = "HVD_CORE_LIBRARY"
_THIS_DIR = os.path.dirname(os.path.abspath(__file__))
# python/horovod/common/ -> the hvd-core source folder, for source checkouts.
_SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(_THIS_DIR)))


def _install_roots():
    """Candidate horovod/common folders that may hold the native files.

    An editable install keeps this file in the source tree while the built
    files go to site-packages, so every horovod/common on sys.path counts.
    """
    roots = [_THIS_DIR]
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "horovod", "common")
        if candidate not in roots and os.path.isdir(candidate):
            roots.append(candidate)
    return roots


def _find_in_install_roots(relative_path, what):
    for root in _install_roots():
        path = os.path.join(root, relative_path)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(
        "hvd-core: cannot find the %s (%s) in %s; reinstall hvd-core "
        "(pip install hvd-core), or for a development build set %s to the "
        "path of libhvd_core.so" % (what, relative_path, ", ".join(_install_roots()), LIBRARY_ENV_VAR))


def get_library_path():
    """Returns the absolute path of ``libhvd_core.so``.

    ``HVD_CORE_LIBRARY``, when set, wins over the installed copy.

    Raises:
        FileNotFoundError: No library is installed and the variable is unset,
            or it names a file that does not exist.
    """
    override = os.environ.get(LIBRARY_ENV_VAR)
    if override:
        if not os.path.isfile(override):
            raise FileNotFoundError("hvd-core: %s=%s does not name a file" % (LIBRARY_ENV_VAR, override))
        return os.path.abspath(override)
    return os.path.abspath(_find_in_install_roots(os.path.join("lib", LIBRARY_NAME), "shared library"))


def get_lib_dir():
    """Returns the folder holding ``libhvd_core.so`` (for ``-L`` and rpath)."""
    return os.path.dirname(get_library_path())


def get_include_dir():
    """Returns the folder to put on the include path so ``#include "hvd/c_api.h"`` works.

    Falls back to the source tree's ``include/`` in a source checkout.

    Raises:
        FileNotFoundError: The headers are neither installed nor in a source tree.
    """
    header = os.path.join("include", "hvd", "c_api.h")
    try:
        found = _find_in_install_roots(header, "C ABI headers")
    except FileNotFoundError:
        if os.path.isfile(os.path.join(_SOURCE_ROOT, header)):
            return os.path.join(_SOURCE_ROOT, "include")
        raise
    return os.path.abspath(os.path.dirname(os.path.dirname(found)))


def get_cmake_dir():
    """Returns the folder holding ``hvd_coreConfig.cmake``: pass it as ``-Dhvd_core_DIR``.

    Raises:
        FileNotFoundError: hvd-core's CMake package config is not installed.
    """
    config = os.path.join("lib", "cmake", "hvd_core", "hvd_coreConfig.cmake")
    return os.path.abspath(os.path.dirname(_find_in_install_roots(config, "CMake package config")))


def get_version():
    """Returns the installed hvd-core distribution's version, e.g. ``"0.1.0"``."""
    try:
        from importlib import metadata
        return metadata.version("hvd-core")
    except Exception:  # not installed as a distribution: ask the library
        import ctypes
        library = ctypes.CDLL(get_library_path())
        library.hvd_get_version_string.restype = ctypes.c_char_p
        return library.hvd_get_version_string().decode("ascii")


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="hvd-core-config",
        description="Print the flags and locations needed to build native code against hvd-core's "
                    "C ABI (libhvd_core). Several options print their values space-separated on "
                    "one line, in the order below.")
    parser.add_argument("--version", action="store_true", help="hvd-core's version")
    parser.add_argument("--includedir", action="store_true", help="folder containing hvd/c_api.h")
    parser.add_argument("--libdir", action="store_true", help="folder containing libhvd_core.so")
    parser.add_argument("--library", action="store_true", help="path of libhvd_core.so")
    parser.add_argument("--cmakedir", action="store_true",
                        help="folder of hvd_coreConfig.cmake, for -Dhvd_core_DIR=...")
    parser.add_argument("--cflags", action="store_true", help="C/C++ compiler flags (-I...)")
    parser.add_argument("--libs", action="store_true",
                        help="linker flags (-L... -lhvd_core with an rpath to the library)")
    return parser


def main(argv=None):
    """Entry point of the ``hvd-core-config`` command; returns the exit status."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    outputs = []
    try:
        if args.version:
            outputs.append(get_version())
        if args.includedir:
            outputs.append(get_include_dir())
        if args.libdir:
            outputs.append(get_lib_dir())
        if args.library:
            outputs.append(get_library_path())
        if args.cmakedir:
            outputs.append(get_cmake_dir())
        if args.cflags:
            outputs.append("-I" + get_include_dir())
        if args.libs:
            lib_dir = get_lib_dir()
            outputs.append("-L%s -Wl,-rpath,%s -lhvd_core" % (lib_dir, lib_dir))
    except FileNotFoundError as e:
        print("hvd-core-config: %s" % e, file=sys.stderr)
        return 1
    if not outputs:
        parser.print_usage(sys.stderr)
        return 2
    print(" ".join(outputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
