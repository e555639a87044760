"""The Python the docs show still matches the code a reader would call with it.

Most of the docs' Python blocks are fragments (they name a DataFrame or a job id the page does not make),
so they are not run here; the README's examples and the Spark guide's first job are run whole elsewhere
(``tests/e2e/test_readme.py``, ``tests/spark/test_docs_example.py``). Each block is checked instead for what
drifts when the code changes under a page:

- it is Python (it parses);
- each name it imports exists in its module;
- each call of a function it imported (or of a module's function, ``spark_client.ingest(...)``) fits the
  function's signature: no keyword it lacks, no more positional arguments than it takes;
- each method it calls on a client (``client.x(...)``) is a method of ``StateStoreClient``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from statestore.services.client import StateStoreClient

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))


def python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for page in PAGES:
        for n, code in enumerate(
            re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
        ):
            blocks.append((f"{page.name}#{n + 1}", code))
    return blocks


BLOCKS = python_blocks()


def imported_names(tree: ast.AST) -> dict[str, Any]:
    """What the block's imports bind, each name checked to exist."""
    names: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"
                names[alias.asname or alias.name] = getattr(module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                module = importlib.import_module(alias.name)
                names[alias.asname or alias.name.split(".")[0]] = module
    return names


def called(call: ast.Call, names: dict[str, Any]) -> tuple[str, Any] | None:
    """The imported function (or imported module's function) ``call`` calls, if it is one."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in names:
        return func.id, names[func.id]
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        module = names.get(func.value.id)
        if isinstance(module, ModuleType):
            assert hasattr(module, func.attr), f"{module.__name__} has no {func.attr}"
            return f"{module.__name__}.{func.attr}", getattr(module, func.attr)
    return None


def test_the_docs_show_python_to_check() -> None:
    assert len(BLOCKS) >= 10, [page for page, _ in BLOCKS]


@pytest.mark.parametrize(("page", "code"), BLOCKS, ids=[page for page, _ in BLOCKS])
def test_a_docs_python_block_fits_the_code_it_calls(page: str, code: str) -> None:
    tree = ast.parse(code, filename=page)
    names = imported_names(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "client":
            assert callable(getattr(StateStoreClient, func.attr, None)), (
                f"{page}: the client has no {func.attr}"
            )
            continue
        target = called(node, names)
        if target is None or not callable(target[1]):
            continue
        name, function = target
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue  # *args or **kwargs: nothing to count
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError):  # a builtin without one
            continue
        try:
            signature.bind_partial(*node.args, **{k.arg: k.value for k in node.keywords if k.arg})
        except TypeError as e:
            pytest.fail(f"{page}: {name}(...) does not fit {name}{signature}: {e}")
