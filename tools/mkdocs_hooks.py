"""mkdocs_hooks.py - what the docs build (mkdocs.yml `hooks:`) adds to plain MkDocs.

- Generates the API reference pages (`api/*.md`): one per public package, each
  listing the names its `__init__.py` exports, read statically with `ast` (the
  frameworks need not be installed), so a name added to a package shows up in
  the reference without editing any page.
- Generates `c_api_reference.md` from the C header (tools/c_api_reference.py).
- Checks that every repository file a page names exists: relative links that
  leave docs/ and `code spans` that look like repository paths
  (`packages/...`, `tools/...`, `examples/...`, `docs/...`), and such paths
  named in running text ("see docs/elastic.md"). A missing one is a
  warning, which `mkdocs build --strict` turns into a failed build.
- Rewrites relative links that leave docs/ (`../tools/soak.py`), which work
  when the Markdown is read in the repository but would point nowhere on the
  built site, to the file's page under `repo_url` (mkdocs.yml), the same
  address the packages' metadata names as their source.
"""

import ast
import logging
import pathlib
import re
import sys

from mkdocs.structure.files import File

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import c_api_reference  # noqa: E402

log = logging.getLogger("mkdocs.hooks.hvd")

# Where each import package's sources live (the `paths` of mkdocstrings in mkdocs.yml).
SOURCES = {
    "horovod.common": "packages/hvd-core/python",
    "horovod.torch": "packages/hvd-torch/src",
    "horovod.tensorflow": "packages/hvd-tensorflow/python",
    "horovod.tensorflow.keras": "packages/hvd-tensorflow/python",
    "horovod.keras": "packages/hvd-tensorflow/python",
    "horovod.mxnet": "packages/hvd-mxnet/src",
    "horovod.runner": "packages/hvd-launch/src",
    "horovod.runner.elastic": "packages/hvd-elastic/src",
}

# (page, title, what the page says first, [(package, submodules rendered whole below it)])
API_PAGES = [
    ("api/common.md", "horovod.common", "hvd-core's framework-free API: numpy arrays in, numpy arrays out. "
     "The framework bindings re-export the same functions for their own tensors.",
     [("horovod.common", ["horovod.common.elastic", "horovod.common.config", "horovod.common.testing"])]),
    ("api/torch.md", "horovod.torch", "PyTorch binding (hvd-torch). Guide: [PyTorch](../torch.md).",
     [("horovod.torch", ["horovod.torch.elastic"])]),
    ("api/tensorflow.md", "horovod.tensorflow", "TensorFlow binding (hvd-tensorflow). Guide: "
     "[TensorFlow](../tensorflow.md).",
     [("horovod.tensorflow", ["horovod.tensorflow.elastic"])]),
    ("api/keras.md", "horovod.tensorflow.keras and horovod.keras", "Keras API (hvd-tensorflow). Guide: "
     "[Keras](../keras.md). `DistributedOptimizer`, `PartialDistributedOptimizer`, "
     "`broadcast_global_variables`, `allreduce`, `allgather`, `broadcast`, `reducescatter` and "
     "`load_model` are made for the Keras each module binds when it is imported "
     "(`horovod._keras.api.make_api`), so they are described in the guide, not here.",
     [("horovod.tensorflow.keras", ["horovod.tensorflow.keras.callbacks", "horovod.tensorflow.keras.elastic"]),
      ("horovod.keras", ["horovod.keras.callbacks", "horovod.keras.elastic"])]),
    ("api/mxnet.md", "horovod.mxnet", "MXNet 1.9 binding (hvd-mxnet). Guide: [MXNet](../mxnet.md).",
     [("horovod.mxnet", [])]),
    ("api/runner.md", "horovod.runner", "The launcher (hvd-launch). Guide: [horovodrun](../launcher.md).",
     [("horovod.runner", ["horovod.runner.run_api", "horovod.runner.check_build"])]),
    ("api/elastic.md", "horovod.runner.elastic", "The elastic driver (hvd-elastic). Guide: "
     "[Elastic training](../elastic.md).",
     [("horovod.runner.elastic", ["horovod.runner.elastic.discovery"])]),
]


def exported_names(package):
    """Public names a package's `__init__.py` defines or imports, in source order.

    Submodules and modules imported under a name (`import tensorflow as tf`)
    are left out; so are names starting with an underscore.
    """
    pkg_dir = ROOT / SOURCES[package] / package.replace(".", "/")
    tree = ast.parse((pkg_dir / "__init__.py").read_text())
    names = []
    defined = set()  # defined here, so not a submodule even where a module has its name

    def visit(body):
        for node in body:
            if isinstance(node, ast.ImportFrom):
                if node.level or (node.module or "").split(".")[0] == "horovod":
                    names.extend(a.asname or a.name for a in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.append(node.name)
                defined.add(node.name)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    submodules = {p.stem for p in pkg_dir.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    public = [n for n in names if not n.startswith("_") and (n not in submodules or n in defined) and n != "*"]
    return list(dict.fromkeys(public))


def basics_names():
    """Names horovod.common binds to methods of its one HorovodBasics (`init = _basics.init`).

    Every binding re-exports them. A static reader sees them as undocumented
    attributes, so the pages list them and point to HorovodBasics instead.
    """
    path = ROOT / SOURCES["horovod.common"] / "horovod/common/__init__.py"
    names = []
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "_basics"):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _api_page(title, intro, packages):
    out = ["# " + title, "", intro, ""]
    for package, submodules in packages:
        if len(packages) > 1:
            out += ["## " + package, ""]
        basics = basics_names()
        names = exported_names(package)
        members = [n for n in names if n not in basics]
        bound = [n for n in basics if n in names or package == "horovod.common"]
        out += ["::: " + package, "    options:", "      show_root_heading: %s" % (len(packages) == 1),
                "      members:"]
        out += ["        - " + name for name in members]
        out.append("")
        if bound:
            out += ["Start-up, topology and build queries, `%s.<name>`: %s. Each is a method of one shared "
                    "[HorovodBasics][horovod.common.HorovodBasics], documented there." % (package, ", ".join(
                        "`%s`" % n for n in bound)), ""]
        for sub in submodules:
            out += ["::: " + sub, "    options:", "      show_root_heading: true",
                    "      heading_level: %d" % (2 if len(packages) == 1 else 3), ""]
    return "\n".join(out)


def on_files(files, config):
    for src_uri, title, intro, packages in API_PAGES:
        files.append(File.generated(config, src_uri, content=_api_page(title, intro, packages)))
    header = c_api_reference.HEADER.read_text()
    page = c_api_reference.render(header)
    # Every exported function must get a heading of its own, however its
    # declaration is laid out (a loose match, independent of the renderer's).
    headings = "\n".join(line for line in page.splitlines() if line.startswith("### "))
    for name in re.findall(r"HVD_EXPORT[^;]*?\b(hvd_\w+)\s*\(", header):
        if "`%s`" % name not in headings:
            log.warning("c_api_reference.md: exported function %s has no entry", name)
    files.append(File.generated(config, "c_api_reference.md", content=page))
    return files


_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
_LINK_TARGET = re.compile(r"(\]\()([^)\s#]+)")
_CODE_PATH = re.compile(r"`((?:\.\./)?(?:packages|tools|examples|docs|\.ci)/[\w./+-]*[\w/])`")
# Paths named in running text ("see docs/elastic.md"), not part of a longer path.
_TEXT_PATH = re.compile(r"(?<![\w./-])((?:packages|tools|examples|docs)/[\w./+-]*"
                        r"\.(?:md|py|sh|cc|h|c|txt|toml|json))\b")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def on_page_markdown(markdown, page, config, files):
    if page.file.generated_by:
        return markdown
    docs_dir = pathlib.Path(config["docs_dir"]).resolve()
    page_dir = (docs_dir / page.file.src_uri).parent
    text = _FENCE.sub("", markdown)
    outside = {}  # link target leaving docs/ -> its address in the repository's source view
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("/"):
            continue
        path = (page_dir / target).resolve()
        if docs_dir in path.parents:
            if files.get_file_from_path(path.relative_to(docs_dir).as_posix()) is None:
                log.warning("%s links to %s, which is not a page of the docs", page.file.src_uri, target)
        elif not path.exists():
            log.warning("%s links to %s, which does not exist in the repository", page.file.src_uri, target)
        elif not config.get("repo_url"):
            log.warning("%s links to %s outside docs/: set repo_url in mkdocs.yml", page.file.src_uri, target)
        elif ROOT in path.parents:
            kind = "tree" if path.is_dir() else "blob"
            outside[target] = "%s/%s/main/%s" % (config["repo_url"].rstrip("/"), kind,
                                                 path.relative_to(ROOT).as_posix())
    for ref in set(_CODE_PATH.findall(text)) | set(_TEXT_PATH.findall(text)):
        if "*" in ref or "<" in ref:
            continue
        path = (page_dir / ref).resolve() if ref.startswith("../") else ROOT / ref
        if not path.exists():
            log.warning("%s names `%s`, which does not exist in the repository", page.file.src_uri, ref)
    if outside:
        markdown = _LINK_TARGET.sub(lambda m: m.group(1) + outside.get(m.group(2), m.group(2)), markdown)
    return markdown
