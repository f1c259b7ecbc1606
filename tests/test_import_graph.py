"""The package's modules import one another without circles (type-only imports count: a circle is a circle).

A circle means two modules cannot be read, tested or replaced apart; the fix is usually a small
Protocol in the module that needs something, naming that need instead of importing its provider.
"""

from __future__ import annotations

import ast
from pathlib import Path

import speakwire

PACKAGE_ROOT = Path(speakwire.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["speakwire", *path.relative_to(PACKAGE_ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports (``from pkg import name`` counts as ``pkg.name`` when that is a module)."""
    found: set[str] = set()
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name in modules}


def _graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE_ROOT.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _imports(path, modules) for path in paths}
    for name, targets in graph.items():  # a package's own __init__ is not an edge worth reporting
        targets.discard(name)
        targets.difference_update(t for t in list(targets) if name.startswith(t + "."))
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back() -> None:
    assert _cycles(_graph()) == []


def test_the_checker_sees_circles_and_type_only_imports() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = _graph()
    # text_stream needs rows from an engine but names that need (RowSource) instead of importing the engine.
    assert "speakwire.engines.qwen3.generation_loop" in graph["speakwire.engines.qwen3.text_stream"]
    assert "speakwire.engines.qwen3.engine" not in graph["speakwire.engines.qwen3.text_stream"]
    assert "speakwire.engines.qwen3.text_stream" in graph["speakwire.engines.qwen3.engine"]


def test_the_utterance_and_its_drivers_meet_only_at_the_driver_interface() -> None:
    graph = _graph()
    package = "speakwire.synthesis"
    drivers = {f"{package}.segment_driver", f"{package}.stream_driver"}
    # The utterance names what it needs (driver.Driver, UtterancePipeline) instead of importing a driver or
    # the pipeline, and no driver imports the utterance, the pipeline or the other driver.
    assert not (drivers | {f"{package}.pipeline"}) & graph[f"{package}.utterance"]
    for driver in drivers:
        assert f"{package}.driver" in graph[driver]
        assert not ({f"{package}.utterance", f"{package}.pipeline"} | (drivers - {driver})) & graph[driver]
    # The pipeline is the one place that chooses a driver.
    assert drivers <= graph[f"{package}.pipeline"]
    choosers = {name for name, targets in graph.items() if name != package and targets & drivers}
    assert choosers == {f"{package}.pipeline"}
