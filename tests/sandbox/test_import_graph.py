"""The sandbox package's import graph has no circle through the service (issue 32, deliverable 6).

Before: sandbox/core.py imported sandbox/service/remote.py (for backend="remote"), which
imports core; sandbox/sessions/pool.py imported it too, and service/remote_session.py imports
pool. Now core and sessions reach the remote backend through sandbox/registry.py only.

Checked statically (every import statement of every module, those inside functions too, but
not `if TYPE_CHECKING:` blocks) and at run time (importing core and sessions loads no
service module).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sandbox"
# where the service may be imported from: itself, and the command line that starts it
MAY_IMPORT_SERVICE = ("sandbox.service", "sandbox.cli")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports() -> dict[str, set[str]]:
    """module -> the sandbox modules it imports (anywhere but under TYPE_CHECKING)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        found: set[str] = set()
        for node in ast.walk(tree):
            if _type_checking_only(node, parents):
                continue
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Constant) and node.value == "sandbox.service.remote":
                found.add(node.value)  # importlib by name counts too (except the registry's)
        graph[_module_name(path)] = {m for m in found if m.split(".")[0] == "sandbox"}
    return graph


def _package(module: str) -> str:
    """sandbox.service.remote -> sandbox.service; top-level modules stand for themselves."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_only_the_service_and_the_cli_import_the_service() -> None:
    offenders = {
        module: sorted(m for m in targets if m.startswith("sandbox.service"))
        for module, targets in imports().items()
        if not module.startswith(MAY_IMPORT_SERVICE) and module != "sandbox.registry"
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_no_package_level_circle_through_the_service() -> None:
    modules = imports()
    graph: dict[str, set[str]] = {}
    for module, targets in modules.items():
        if module == "sandbox.registry":
            continue  # the seam: it names the service (by string) so that nothing else does
        edges = graph.setdefault(_package(module), set())
        edges |= {_package(t) for t in targets if t in modules}
    # everything the service reaches must not reach the service back
    reach: dict[str, set[str]] = {}

    def reachable(start: str) -> set[str]:
        if start not in reach:
            reach[start] = set()
            for nxt in graph.get(start, ()):
                reach[start] |= {nxt, *reachable(nxt)}
        return reach[start]

    service = "sandbox.service"
    back = sorted(p for p in reachable(service) - {service} if service in reachable(p))
    assert back == [], f"packages in a circle with {service}: {back}"


def test_importing_core_and_sessions_loads_no_service_module() -> None:
    code = (
        "import sys, sandbox, sandbox.core, sandbox.sessions.pool\n"
        "print(sorted(m for m in sys.modules if m.startswith('sandbox.service')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
