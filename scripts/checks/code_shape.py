"""The package's shape in numbers, for a redesign's before and after:
modules, files over 400 lines, functions over 60 lines of code (their
docstrings not counted; with their names), and the places that call
``locals()``.

    python scripts/checks/code_shape.py                 # this checkout's keras_gresnet/
    python scripts/checks/code_shape.py --root OTHER    # another checkout's

Import cycles and imports that run back up are ``tests/test_architecture.py``'s
(and ``farm-studio look``'s); duplicate code is the ``duplicates`` tool's.
"""

import argparse
import ast
import json
from pathlib import Path

LONG_FILE, LONG_FUNCTION = 400, 60


def shape(package):
    modules = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    long_files, long_functions, locals_calls = {}, {}, []
    for path in modules:
        name = str(path.relative_to(package.parent))
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > LONG_FILE:
            long_files[name] = lines
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                first = node.body[0]
                if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                        and isinstance(first.value.value, str)):  # the docstring's lines
                    length -= first.end_lineno - first.lineno + 1
                if length > LONG_FUNCTION:
                    long_functions[f"{name}:{node.name}"] = length
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id == "locals"):
                locals_calls.append(f"{name}:{node.lineno}")
    return dict(modules=len(modules), files_over_400_lines=long_files,
                functions_over_60_lines=long_functions, locals_calls=locals_calls)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2],
                        help="a checkout (default: this one)")
    args = parser.parse_args(argv)
    result = shape(args.root / "keras_gresnet")
    print(json.dumps(result, indent=1))
    print(f"modules {result['modules']}, files over {LONG_FILE} lines "
          f"{len(result['files_over_400_lines'])}, functions over {LONG_FUNCTION} lines "
          f"{len(result['functions_over_60_lines'])}, locals() calls "
          f"{len(result['locals_calls'])}")


if __name__ == "__main__":
    main()
