"""The import graph of the installed packages, read with ``ast`` (nothing is imported).

Used by tests/test_import_graph.py. Module names are the installed ones: ``sync/`` is
``trackstore.sync`` and ``cli/`` is ``trackstore.cli`` (see pyproject.toml's package-dir).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"trackstore": REPO / "trackstore", "trackstore.sync": REPO / "sync", "trackstore.cli": REPO / "cli",
                "trackstore.ui": REPO / "ui"}


@dataclass(frozen=True)
class Import:
    importer: str  # module doing the import
    module: str  # module imported (resolved to a module of ours when it is one)
    names: tuple[str, ...]  # names taken from it (``from m import a, b``), () for ``import m``
    line: int
    type_checking: bool  # inside ``if TYPE_CHECKING:``


def modules() -> dict[str, Path]:
    """Every module of ours: dotted name -> file."""
    out: dict[str, Path] = {}
    for pkg, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join([pkg, *parts])
            if pkg == "trackstore" and parts and parts[0] in ("sync", "cli", "ui"):
                continue
            out[name] = path
    return out


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(importer: str, is_pkg: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not is_pkg:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *(module.split(".") if module else [])])


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                for child in node.body:
                    for sub in ast.walk(child):
                        if hasattr(sub, "lineno"):
                            lines.add(sub.lineno)
    return lines


def imports() -> list[Import]:
    """Every import statement in our modules, resolved to our module names where it is one of ours."""
    mods = modules()
    out: list[Import] = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        guarded = _type_checking_lines(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    out.append(Import(name, alias.name, (), node.lineno, node.lineno in guarded))
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(name, _is_package(path), node.level, node.module)
                names = tuple(a.name for a in node.names)
                # ``from pkg import module`` imports the module itself
                sub = [n for n in names if f"{target}.{n}" in mods]
                if sub:
                    for n in sub:
                        out.append(Import(name, f"{target}.{n}", (), node.lineno, node.lineno in guarded))
                    names = tuple(n for n in names if n not in sub)
                    if not names:
                        continue
                out.append(Import(name, target, names, node.lineno, node.lineno in guarded))
    return out


def ours(module: str) -> bool:
    return module == "trackstore" or module.startswith("trackstore.")


def graph(include_type_checking: bool = False) -> dict[str, set[str]]:
    """importer -> modules of ours it imports (at run time, unless ``include_type_checking``)."""
    g: dict[str, set[str]] = {m: set() for m in modules()}
    mods = set(g)
    for imp in imports():
        if imp.type_checking and not include_type_checking:
            continue
        if not ours(imp.module):
            continue
        target = imp.module
        while target not in mods and "." in target:  # ``import trackstore.x.y`` of a name inside a module
            target = target.rsplit(".", 1)[0]
        if target != imp.importer:
            g[imp.importer].add(target)
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def module_attribute_uses(path: Path, importer: str) -> list[tuple[str, str, str, int]]:
    """``alias.attr`` uses in one file where ``alias`` names a module of ours it imported:
    (alias, module, attr, line)."""
    mods = modules()
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = _is_package(path)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in mods and a.asname:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(importer, is_pkg, node.level, node.module)
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in mods:
                    aliases[a.asname or a.name] = full
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            target = aliases[node.value.id]
            if target != importer:
                out.append((node.value.id, target, node.attr, node.lineno))
    return out


def foreign_private_attributes(path: Path) -> list[tuple[str, int, str]]:
    """``obj._x`` uses in one file where ``_x`` is defined nowhere in that file: (attr, line, text).

    Defined means: a function, class, argument or name of that spelling, an attribute assigned
    anywhere in the file, or a string constant (``__slots__`` entries). ``self``/``cls`` are skipped.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            defined.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.ImportFrom):
            defined.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            defined.add(node.value)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        if node.attr not in defined:
            out.append((node.attr, node.lineno, ast.unparse(node)))
    return out
