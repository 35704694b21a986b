"""c_api_reference.py - a Markdown reference of hvd-core's C ABI, made from its header.

The header's comments are the reference for every function and struct, so
this page is generated from `packages/hvd-core/include/hvd/c_api.h` itself and
can never drift from it: each banner section (``/* Errors */``) becomes a
heading, and each group of declarations (a comment with the declarations that
follow it, up to a blank line) becomes a C code block under a heading naming
what it declares. The docs build (tools/mkdocs_hooks.py) adds the page as
``c_api_reference.md``; run this file to print it.

    python tools/c_api_reference.py [path/to/c_api.h]
"""

import pathlib
import re
import sys

HEADER = pathlib.Path(__file__).resolve().parent.parent / "packages/hvd-core/include/hvd/c_api.h"

_BANNER = re.compile(r"^/\* -{10,} \*/$")
_FUNCTION = re.compile(r"^HVD_EXPORT\s+[^(]*?\b(hvd_\w+)\s*\(", re.M)
_TYPEDEF_END = re.compile(r"^\}\s*(\w+)\s*;", re.M)
_TYPEDEF_LINE = re.compile(r"^typedef\s+(?:struct|enum)\s+\w+\s+(\w+)\s*;", re.M)
_TYPEDEF_FN = re.compile(r"^typedef\s+[^(]*\(\*\s*(\w+)\)", re.M)
_DEFINE = re.compile(r"^#define\s+(HVD_\w+)", re.M)


def exported_functions(text):
    """Names of the functions the header exports (declared with HVD_EXPORT)."""
    return _FUNCTION.findall(text)


def _declared_names(chunk):
    names = []
    for pattern in (_FUNCTION, _TYPEDEF_END, _TYPEDEF_LINE, _TYPEDEF_FN, _DEFINE):
        names += [(m.start(), m.group(1)) for m in pattern.finditer(chunk)]
    ordered = [name for _, name in sorted(names)]
    return list(dict.fromkeys(ordered))


def _body(text):
    """The declarations between the opening `extern "C" {` and its closing brace."""
    start = text.index('extern "C" {')
    start = text.index("#endif", start) + len("#endif")
    end = text.rindex("#ifdef __cplusplus")
    return text[start:end]


def _intro(text):
    match = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    lines = [re.sub(r"^ ?\* ?", "", line) for line in match.group(1).splitlines()]
    return "\n".join(lines).strip("\n")


def render(text):
    """The reference page, as Markdown, for the header source `text`."""
    out = [
        "# C API reference",
        "",
        "Generated from `packages/hvd-core/include/hvd/c_api.h` by `tools/c_api_reference.py`"
        " at every docs build: the declarations and their comments exactly as the header has them."
        " How to build against the library: [Building native code](c_api.md); what each minor"
        " version added: [ABI changelog](abi_changelog.md).",
        "",
        "## The contract",
        "",
        "```text",
        _intro(text),
        "```",
        "",
    ]
    lines = _body(text).splitlines()
    chunks, current = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _BANNER.match(line.strip()) and i + 2 < len(lines) and _BANNER.match(lines[i + 2].strip()):
            if current:
                chunks.append(("code", current))
                current = []
            title = lines[i + 1].strip().strip("/*").strip()
            chunks.append(("section", title))
            i += 3
            continue
        if not line.strip():
            if current:
                chunks.append(("code", current))
                current = []
        else:
            current.append(line)
        i += 1
    if current:
        chunks.append(("code", current))

    for kind, value in chunks:
        if kind == "section":
            out += ["## " + value, ""]
            continue
        code = "\n".join(value)
        names = _declared_names(code)
        if names:
            out += ["### " + ", ".join("`%s`" % n for n in names), ""]
        out += ["```c", code, "```", ""]
    return "\n".join(out)


def main(argv):
    path = pathlib.Path(argv[1]) if len(argv) > 1 else HEADER
    sys.stdout.write(render(path.read_text()))


if __name__ == "__main__":
    main(sys.argv)
