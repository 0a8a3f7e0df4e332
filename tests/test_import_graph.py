"""The import structure docs/architecture.md draws, held by the code (read with ast, nothing imported).

- no import circle anywhere in trackstore, trackstore.sync and trackstore.cli (imports inside
  functions and under ``if TYPE_CHECKING:`` count: a lazy or type-only circle is still a circle
  for the reader);
- imports only point down the layers below;
- no module imports another module's underscore names.
"""

from __future__ import annotations

from tests import importgraph as ig

# The layers from the bottom up. A module may import its own layer and the layers listed for it.
BASE = "base"  # trackstore.errors, trackstore._version
LAYERS: dict[str, set[str]] = {
    BASE: set(),
    "store": {BASE},
    "records": {BASE, "store"},
    "write": {BASE, "store", "records"},
    "read": {BASE, "store", "records"},
    "upkeep": {BASE, "store", "records", "read"},
    # the package itself: the public names, gathered from the layers below (some lazily)
    "facade": {BASE, "store", "records", "write", "read", "upkeep", "integrations"},
    "integrations": {BASE, "store", "records", "write", "read", "facade"},
    "compat": {BASE, "store", "records", "write", "read", "facade", "integrations"},
    "sync": {BASE, "store", "records", "read", "upkeep", "facade"},
    # the dashboard: a reader beside the CLI (the core's read side only; it never writes the store)
    "ui": {BASE, "store", "records", "read", "facade"},
    "cli": {BASE, "store", "records", "write", "read", "upkeep", "facade", "integrations", "compat", "sync", "ui"},
}


def layer(module: str) -> str:
    if module == "trackstore":
        return "facade"
    parts = module.split(".")
    if parts[1] in ("errors", "_version"):
        return BASE
    if parts[1] in LAYERS:
        return parts[1]
    raise AssertionError(f"{module} is in no layer: add it to a subpackage (or to LAYERS)")


def test_every_module_is_in_a_layer():
    for module in ig.modules():
        layer(module)


def test_no_import_circle():
    assert ig.cycles(ig.graph(include_type_checking=True)) == []


def test_imports_point_down_the_layers():
    wrong = []
    for importer, targets in ig.graph(include_type_checking=True).items():
        mine = layer(importer)
        for target in targets:
            theirs = layer(target)
            if theirs != mine and theirs not in LAYERS[mine]:
                wrong.append(f"{importer} ({mine}) imports {target} ({theirs})")
    assert wrong == []


def _package_of(module: str) -> str:
    return module.rsplit(".", 1)[0]


def test_no_module_imports_another_modules_underscore_names():
    mods = ig.modules()
    wrong = []
    for imp in ig.imports():
        if not ig.ours(imp.module):
            continue
        private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        leaf = imp.module.rsplit(".", 1)[-1]
        # a private module: only its own package may import it (trackstore._version is the base)
        if leaf.startswith("_") and not leaf.startswith("__") and imp.module in mods and layer(imp.module) != BASE:
            if _package_of(imp.module) != _package_of(imp.importer):
                private.append(leaf)
        if private and imp.module != imp.importer:
            wrong.append(f"{imp.importer}:{imp.line} imports {', '.join(private)} from {imp.module}")
    assert wrong == []


def test_no_module_reaches_into_an_imported_modules_underscore_names():
    """``from trackstore.store import meta as _meta`` then ``_meta._helper(...)`` is the same reach."""
    wrong = []
    for module, path in ig.modules().items():
        for alias, target, attr, line in ig.module_attribute_uses(path, module):
            if attr.startswith("_") and not attr.startswith("__"):
                wrong.append(f"{module}:{line} uses {alias}.{attr} of {target}")
    assert wrong == []


# Private attributes of a third-party library's objects that an adapter must reach (no public API
# does the job); each is pinned by the adapter's version floor and its tests.
THIRD_PARTY_PRIVATE = {
    ("trackstore.sync.swanlab", "_components"),  # swanlab's run: the event emitter
    ("trackstore.sync.swanlab", "_ctx"),  # swanlab's run: its step counter
    ("trackstore.sync.swanlab", "_api_lock"),  # swanlab's run: the lock its own log() takes
}


def test_no_module_uses_private_attributes_it_does_not_define():
    """``obj._x`` where ``_x`` is nowhere defined in the module (as a function, class, attribute
    or name) reaches into another module's object: ``run._writer_info`` from an integration,
    ``adapter._do`` from a helper module. ``self._x`` and ``cls._x`` are the module's own."""
    wrong = []
    for module, path in ig.modules().items():
        for attr, line, text in ig.foreign_private_attributes(path):
            if (module, attr) not in THIRD_PARTY_PRIVATE:
                wrong.append(f"{module}:{line} {text}")
    assert wrong == []
