"""The package's shape: imports flow one way with no cycle, every zoo builder
is a literal ``def`` with the Keras Applications signature, every module says
what it is for."""

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest

import keras_gresnet
from keras_gresnet import zoo

ROOT = Path(keras_gresnet.__file__).resolve().parent
PACKAGE = "keras_gresnet"
# The one direction imports flow: a module may import its own part and the
# parts before it, never one after it. Same-rank parts do not import each other.
ORDER = [
    ("limits", "_text", "_catalog"),
    ("_version", "_checks", "_cpu", "_paths", "papers", "_pixels", "files",
     "optimizers"),
    ("_options", "runlock"),
    ("data",),
    ("artefacts",),
    ("artefact_checks",),
    ("artefact_runtime",),
    ("layers",),
    ("weights",),
    ("zoo",),
    ("plots",),
    ("training",),
    ("analysis",),
    ("finetune_data",),
    ("finetune", "convert", "export"),
    ("finetune_run",),
    ("predictions",),
    ("cli",),
]
RANK = {part: rank for rank, parts in enumerate(ORDER) for part in parts}
# The root package is the facade above everything: it may name any module
# (lazily), and no module imports it back (the version lives in _version).
ROOT_PART = "<root>"
RANK[ROOT_PART] = len(ORDER)


def _part(module):
    return module.split(".")[1] if "." in module else ROOT_PART
KERAS_APPLICATIONS = ("include_top", "weights", "input_tensor", "input_shape", "pooling",
                      "classes", "classifier_activation", "name")


def _modules():
    """``{dotted name: path}`` of every module of the package."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(module, path):
    """The package modules ``module`` imports anywhere in its file (function
    bodies included: an import inside a function still runs), with the
    packages whose ``__init__`` each import executes."""
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from a import b``: the submodule a.b when there is one, else a.
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in MODULES
                     else node.module for alias in node.names]
        for name in names:
            if name == PACKAGE:  # the root package itself (`from keras_gresnet import x`)
                targets.add(PACKAGE)
                continue
            if not name.startswith(PACKAGE + ".") or name not in MODULES:
                continue
            # Importing a.b.c runs a/__init__ and a/b/__init__ first, but a
            # module's own packages are already being imported.
            parts = name.split(".")
            for i in range(2, len(parts) + 1):
                target = ".".join(parts[:i])
                if not module.startswith(target + ".") and target != module:
                    targets.add(target)
    return targets


GRAPH = {module: _imported(module, path) for module, path in MODULES.items()}


def _cycle(graph):
    """One import cycle as a list of modules, or ``None``."""
    state = {}

    def visit(module, trail):
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                return trail[trail.index(target):] + [target]
            if target not in state:
                found = visit(target, trail + [target])
                if found:
                    return found
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module, [module])
            if found:
                return found
    return None


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_among_the_package_modules():
    assert len(GRAPH) > 30 and "keras_gresnet.zoo.mlps" in GRAPH
    assert "keras_gresnet.layers" in GRAPH["keras_gresnet.zoo.mlps"]
    assert _cycle(GRAPH) is None, f"import cycle: {' -> '.join(_cycle(GRAPH))}"


def test_imports_flow_one_way():
    assert set(RANK) == {_part(m) for m in GRAPH}, "a part of the package has no rank"
    assert PACKAGE in GRAPH and f"{PACKAGE}._version" in GRAPH[PACKAGE]
    upward = []
    for module, targets in GRAPH.items():
        part = _part(module)
        for target in targets:
            other = _part(target)
            if other != part and RANK[other] >= RANK[part]:
                upward.append(f"{module} imports {target}")
    assert not upward, upward


def test_every_builder_is_a_literal_def_with_the_keras_applications_signature():
    names = zoo.list_models()
    assert len(names) >= 27
    for name in names:
        builder = zoo.model_builder(name)
        assert builder is getattr(zoo, name) and builder.__name__ == name
        source = Path(inspect.getsourcefile(inspect.unwrap(builder))).read_text()
        assert re.search(rf"^def {name}\(", source, re.M), f"no literal `def {name}(`"
        params = inspect.signature(builder).parameters
        kinds = {p.kind for p in params.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{name} takes **kwargs"
        assert inspect.Parameter.VAR_POSITIONAL not in kinds, f"{name} takes *args"
        assert "builder" not in params, f"{name} has a hidden builder argument"
        missing = [a for a in KERAS_APPLICATIONS if a not in params]
        assert not missing, f"{name} lacks {missing}"
        assert params["name"].default == name, f"{name}'s default model name"
        assert params["weights"].default is None and params["include_top"].default is True
        assert builder.__doc__ and builder.__doc__.strip()


def test_every_builder_passes_each_argument_on_by_name():
    # The data flow is visible: a builder's body is one call of its family's
    # builder that names every argument (``n=n``), never ``locals()``.
    for name in zoo.list_models():
        builder = inspect.unwrap(zoo.model_builder(name))
        node = ast.parse(textwrap.dedent(inspect.getsource(builder))).body[0]
        body = [s for s in node.body if not (isinstance(s, ast.Expr)
                                             and isinstance(s.value, ast.Constant))]
        assert len(body) == 1 and isinstance(body[0], ast.Return), name
        call = body[0].value
        assert isinstance(call, ast.Call) and not call.args, name
        passed = {k.arg: k.value for k in call.keywords}
        for param in inspect.signature(builder).parameters:
            value = passed.get(param)
            assert isinstance(value, ast.Name) and value.id == param, (name, param)
    for module, path in MODULES.items():
        calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id == "locals"]
        assert not calls, f"{module} calls locals()"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_says_what_it_is_for(module):
    docstring = ast.get_docstring(ast.parse(MODULES[module].read_text()))
    assert docstring and len(docstring.split()) >= 5, f"{module} has no module docstring"


def _readme_modules():
    """The modules of the README's architecture table, top to bottom, as
    dotted names (``layers/`` is the package ``keras_gresnet.layers``)."""
    readme = (ROOT.parent / "docs" / "architecture.md").read_text()
    section = readme[readme.index("## Architecture"):readme.index("## Dependencies")]
    names = re.findall(r"^\| `([A-Za-z_/]+)` \|", section, re.M)
    return [PACKAGE + "." + name.rstrip("/").replace("/", ".") for name in names]


def test_the_readme_architecture_table_is_complete_and_in_import_order():
    listed = _readme_modules()
    assert len(listed) == len(set(listed)), "a module is listed twice"
    assert set(listed) == set(GRAPH) - {PACKAGE}, (
        f"missing: {sorted(set(GRAPH) - {PACKAGE} - set(listed))}; "
        f"not a module: {sorted(set(listed) - set(GRAPH))}")
    position = {module: i for i, module in enumerate(listed)}
    for module in listed:
        for target in GRAPH[module] - {PACKAGE}:
            if target.startswith(module + "."):
                continue  # a package's facade names its own modules
            assert position[target] < position[module], (
                f"{module} imports {target}, listed below it in the README")
