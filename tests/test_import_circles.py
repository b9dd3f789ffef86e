"""The import graph of src/wcodec: no circles, the kernel layer a leaf, gpu/ below torch/.

Every import counts, at module level or inside a function (a lazy import still ties the two
modules together for a reader). Read with ast: nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Import circles tolerated inside src/wcodec: none (issue 30 broke the last ones).
ALLOWED: set = set()


def module_files(root: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under root/wcodec (packages by their name)."""
    mods = {}
    for path in sorted((root / "wcodec").rglob("*.py")):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imported(node: ast.AST, package: str) -> list[str]:
    """The dotted names one import statement in ``package`` names (submodules where it names them)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return [base] + [f"{base}.{a.name}" for a in node.names]


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module -> the wcodec modules it imports (not its own parent packages, not ``wcodec``)."""
    mods = module_files(root)
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = _imported(node, package)
            if isinstance(node, ast.ImportFrom) and all(n in mods for n in names[1:]) and names[1:]:
                names = names[1:]  # `from pkg import submodule`: the submodule, not pkg/__init__
            for t in names:
                while t and t not in mods:  # an attribute of a module: that module
                    t = t.rpartition(".")[0]
                if t and t != m and t != "wcodec" and not m.startswith(t + "."):
                    graph[m].add(t)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, found = {}, {}, set(), [], []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


@pytest.fixture(scope="module")
def graph():
    return import_graph()  # ~1 s of parsing: once for the three tests below


def test_no_import_circle_in_wcodec(graph):
    new = [sorted(c) for c in circles(graph) if c not in ALLOWED]
    assert not new, "import circles: " + "; ".join(", ".join(c) for c in new)


def test_kernel_layer_imports_nothing_above_it(graph):
    """wcodec.native (C extension wrapper and numba kernels) is the bottom layer."""
    kernels = [m for m in graph if m == "wcodec.native" or m.startswith("wcodec.native.")]
    assert len(kernels) >= 4
    up = {m: sorted(t for t in graph[m] if t not in kernels) for m in kernels}
    assert not any(up.values()), up


def test_gpu_does_not_import_torch_package(graph):
    up = {m: sorted(t for t in ts if t == "wcodec.torch" or t.startswith("wcodec.torch."))
          for m, ts in graph.items() if m.startswith("wcodec.gpu")}
    assert not any(up.values()), up


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "wcodec" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize("back", ["from wcodec import a\n",  # module level, absolute
                                  "def f():\n    from ..a import g\n",  # in a function, a name
                                  "from .. import a\n"])  # relative, a submodule
def test_a_new_circle_is_found(tmp_path, back):
    """The checker itself: a two-module circle made each way is reported, its breaking is not."""
    files = {"__init__.py": "", "a.py": "from .pkg.b import x\n", "pkg/__init__.py": "", "pkg/b.py": back}
    assert circles(import_graph(_tree(tmp_path, files))) == [frozenset({"wcodec.a", "wcodec.pkg.b"})]
    (tmp_path / "wcodec" / "pkg" / "b.py").write_text("x = 1\n")
    assert circles(import_graph(tmp_path)) == []


def test_a_submodule_importing_its_package_is_no_edge(tmp_path):
    """``from . import helper`` in k/c.py names k's own __init__, which imports c: not a circle."""
    files = {"__init__.py": "", "k/__init__.py": "from .c import run\n\ndef helper():\n    pass\n",
             "k/c.py": "def run():\n    from . import helper\n"}
    graph = import_graph(_tree(tmp_path, files))
    assert graph["wcodec.k"] == {"wcodec.k.c"} and graph["wcodec.k.c"] == set()
    assert circles(graph) == []
