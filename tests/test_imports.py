"""The package's import graph: no cycle among ada_jax's modules (every import, at any depth of a
file: one inside a function is still an arrow), and every module imports on its own, in any
order, in a fresh interpreter."""
import ast
import os
import random
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "ada_jax")


def modules(package: str = PACKAGE) -> dict:
    """{dotted module name: file} of every module of the package in the folder `package`."""
    out, top = {}, os.path.dirname(package)
    for d, _, files in os.walk(package):
        for f in files:
            if f.endswith(".py"):
                name = os.path.relpath(os.path.join(d, f), top)[:-3].replace(os.sep, ".")
                out[name.removesuffix(".__init__")] = os.path.join(d, f)
    return out


def import_graph(package: str = PACKAGE) -> dict:
    """{module: the package's modules it imports}, the package itself left out (its
    __init__ imports none of them)."""
    mods, top = modules(package), os.path.basename(package)
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        package = m if path.endswith("__init__.py") else m.rpartition(".")[0]
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for n in names:
                while n and n not in mods:
                    n = n.rpartition(".")[0]
                if n and n not in (m, top):
                    graph[m].add(n)
    return graph


def cycle(graph: dict):
    """One import cycle as a list of modules (first == last), or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = "done"
        stack.pop()
        return None
    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 40 and graph["ada_jax.train"] >= {"ada_jax.collect", "ada_jax.learn"}
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def test_an_import_inside_a_function_closes_a_cycle(tmp_path):
    """What a lazy import hides at run time is still an arrow of the graph."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("import pkg.d\n")
    (pkg / "d.py").write_text("")
    graph = import_graph(str(pkg))
    assert cycle(graph) is None and graph["pkg.sub.b"] == {"pkg.c"}
    (pkg / "d.py").write_text("def g():\n    from pkg import a\n")
    assert cycle(import_graph(str(pkg))) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.d", "pkg.a"]


def test_every_module_imports_in_any_order():
    """One fresh interpreter imports every module in a shuffled order (the seed is in the
    failure): a module that works only after another has been imported fails here."""
    names = sorted(modules())
    seed = random.randrange(2**32)
    random.Random(seed).shuffle(names)
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    out = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"order (seed {seed}): {names}\n{out.stderr[-3000:]}"
