"""The tree reads by job (docs/architecture.md, "Code layout"): no module over MAX_LINES lines, and imports go one
way, from the commands down to the configuration model, never back up."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 500
# Lowest layer first. A module may import from its own layer and the layers below it, never from one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ndfleet.stackconfig", "ndfleet.regularfile", "ndfleet.images", "ndfleet.boot_contract",
     "ndfleet.boot_version"),  # the configuration
    # model; reading bounded input files; what Azure's images hold (the image contracts); the figures boot data and
    # the resources around it agree on (Azure's size limits, the health probe)
    ("ndfleet.nodefiles", "ndfleet.azure", "ndfleet.cliconvention"),  # what is rendered for a node; reading Azure
    # (clouds, credentials, the one bounded HTTP transport): below every reader of Azure (cost, preflight, status,
    # the commands); the command line's exit codes and error prefix, used by every module that prints for a command
    ("ndfleet.slurm", "ndfleet.monitoring", "ndfleet.cost"),  # their files and settings, on top of the node's;
    # what the VMs cost
    ("ndfleet.prepare", "ndfleet.machine_files", "ndfleet.stackload"),  # the one prepare step every command and
    # `pulumi up` run; every file each machine kind receives, read from what it prepared; stack -> spec for readers
    ("ndfleet.preflight", "ndfleet.status", "ndfleet.components"),  # reading Azure (checks, the fleet's
    # state); the Pulumi components
    ("ndfleet.goodput",),  # where the node-hours went: range queries through status's workspace reader
    ("ndfleet.program",),  # the Pulumi program
    ("ndfleet.plans",),  # the program under mocks, the plan document, diff and policies
    ("ndfleet.commands", "ndfleet.cli"),  # the `ndfleet` command
)
# Where the package's modules live: ndfleet/components is a link to the top-level components/.
SOURCE_ROOTS = {"ndfleet": REPO / "ndfleet", "ndfleet.components": REPO / "components"}


def layer_of(module: str) -> int | None:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    return None


def imported_modules(source: str) -> set[str]:
    """Every ndfleet module a source imports, at module level or inside a function (a lazy import counts)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from ndfleet import plans`
    return {m for m in found if m == "ndfleet" or m.startswith("ndfleet.")}


def upward_imports(sources: Mapping[str, str]) -> list[str]:
    """`module -> imported` for every import of a higher layer (modules in no layer are left out)."""
    problems = []
    for module, source in sorted(sources.items()):
        own = layer_of(module)
        if own is None:
            continue
        for imported in sorted(imported_modules(source)):
            theirs = layer_of(imported)
            if theirs is not None and theirs > own:
                problems.append(f"{module} (layer {own}) imports {imported} (layer {theirs})")
    return problems


def long_files(paths: Iterable[Path], limit: int = MAX_LINES) -> list[str]:
    return [f"{p}: {n} lines" for p in sorted(paths) if (n := len(p.read_text(encoding="utf-8").splitlines())) > limit]


def python_files(root: Path) -> list[Path]:
    """The .py files under root, not through links (ndfleet/components, ndfleet/templates: read at their source)."""
    links = [d for d in root.iterdir() if d.is_symlink()]
    return [p for p in root.rglob("*.py") if not any(p.is_relative_to(link) for link in links)]


def package_sources() -> dict[str, str]:
    """Dotted module name -> source, for every module of the ndfleet package (components included)."""
    sources = {}
    for package, root in SOURCE_ROOTS.items():
        for path in python_files(root):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            sources[".".join([package, *parts])] = path.read_text(encoding="utf-8")
    return sources


def test_every_package_module_has_a_layer() -> None:
    unplaced = sorted(m for m in package_sources() if m != "ndfleet" and layer_of(m) is None)
    assert not unplaced, f"add these to LAYERS in tests/test_layout.py (docs/architecture.md): {unplaced}"


def test_no_module_imports_a_higher_layer() -> None:
    assert not upward_imports(package_sources())


def test_no_module_is_longer_than_the_limit() -> None:
    roots = (REPO / "ndfleet", REPO / "components", REPO / "node" / "ndfleet_node")
    assert not long_files(p for root in roots for p in python_files(root))


def test_an_upward_import_is_reported() -> None:
    """The layer check can fail: the configuration model importing a command, even lazily, is named."""
    sources = {
        "ndfleet.stackconfig.config": "def f():\n    from ndfleet.commands import plan\n",
        "ndfleet.commands.plan": "from ndfleet.stackconfig.config import load_spec\n",
    }
    assert upward_imports(sources) == [
        "ndfleet.stackconfig.config (layer 0) imports ndfleet.commands (layer 8)",
        "ndfleet.stackconfig.config (layer 0) imports ndfleet.commands.plan (layer 8)",
    ]


def test_a_long_module_is_reported(tmp_path: Path) -> None:
    """The length check can fail: a module one line over the limit is named, one at the limit is not."""
    at_limit, over = tmp_path / "at_limit.py", tmp_path / "over.py"
    at_limit.write_text("x = 1\n" * MAX_LINES)
    over.write_text("x = 1\n" * (MAX_LINES + 1))
    assert long_files([at_limit, over]) == [f"{over}: {MAX_LINES + 1} lines"]


def shared_name_copies(sources: Mapping[str, str], names: Mapping[str, str]) -> list[str]:
    """Where a module other than ndfleet_node.names defines one of its names, or spells one of its values as a
    string of its own (a tag key, a reason): the tool and the node must import them from the one module."""
    problems = []
    values = {value: name for name, value in names.items() if len(value) > len("ndfleet:")}
    for module, source in sorted(sources.items()):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in names:
                        problems.append(f"{module}:{node.lineno} defines {target.id}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in values:
                problems.append(f"{module}:{node.lineno} spells {values[node.value]} ({node.value!r})")
    return problems


def shared_names() -> dict[str, str]:
    from ndfleet_node import names

    return {k: v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}


def tool_and_node_sources() -> dict[str, str]:
    sources = package_sources()
    node_root = REPO / "node" / "ndfleet_node"
    for path in python_files(node_root):
        if path.name != "names.py" or path.parent != node_root:
            sources["ndfleet_node." + ".".join(path.relative_to(node_root).with_suffix("").parts)] = path.read_text()
    return sources


def test_each_shared_name_is_defined_once() -> None:
    assert not shared_name_copies(tool_and_node_sources(), shared_names())


def test_a_copied_shared_name_is_reported() -> None:
    sources = {"ndfleet.x": 'TAG_ISLAND = "i"\n', "ndfleet_node.y": 'tags.get("ndfleet:island")\n',
               "ndfleet_node.z": 'from ndfleet_node.names import TAG_ISLAND\ntags.get(TAG_ISLAND)\n'}
    assert shared_name_copies(sources, {"TAG_ISLAND": "ndfleet:island"}) == [
        "ndfleet.x:1 defines TAG_ISLAND", "ndfleet_node.y:1 spells TAG_ISLAND ('ndfleet:island')"]


# Commands that only read (Azure, the workspace, the price list): they must not import Pulumi's components.
READ_ONLY_COMMANDS = ("ndfleet.commands.status", "ndfleet.commands.impact", "ndfleet.commands.cost",
                      "ndfleet.commands.preflight", "ndfleet.status", "ndfleet.preflight", "ndfleet.cost",
                      "ndfleet.azure", "ndfleet.commands.goodput", "ndfleet.goodput")


def reachable(sources: Mapping[str, str], start: str) -> set[str]:
    """Every ndfleet module start imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module in seen or module not in sources:
            continue
        seen.add(module)
        todo.extend(imported_modules(sources[module]))
    return seen


def test_read_only_commands_do_not_import_components() -> None:
    sources = package_sources()
    offenders = {m: sorted(c for c in reachable(sources, m) if c.startswith("ndfleet.components"))
                 for m in sources if any(m == p or m.startswith(p + ".") for p in READ_ONLY_COMMANDS)}
    assert not {m: c for m, c in offenders.items() if c}


def import_cycles(sources: Mapping[str, str]) -> list[list[str]]:
    """Groups of modules that import each other, directly or through others (a lazy import counts). An import of
    a module's own package (its __init__) is not counted: Python runs that first, and it is a package's own affair."""
    edges = {
        m: {i for i in imported_modules(s) if i in sources and i != m and not m.startswith(i + ".")}
        for m, s in sources.items()
    }

    def reach(start: str) -> set[str]:
        seen, todo = set(), list(edges[start])
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(edges[module])
        return seen

    reached = {m: reach(m) for m in sources}
    groups = {tuple(sorted({m} | {o for o in reached[m] if m in reached[o]})) for m in sources if m in reached[m]}
    return sorted(list(g) for g in groups)


def test_no_import_cycles() -> None:
    # There were two (issue 30): stackconfig.clusterspec <-> stackconfig.vms and preflight.checks <-> machine_quota.
    assert import_cycles(package_sources()) == []


def test_an_import_cycle_is_reported() -> None:
    sources = {"ndfleet.a": "from ndfleet.b import x\n", "ndfleet.b": "def f():\n    from ndfleet.c import y\n",
               "ndfleet.c": "import ndfleet.a\n", "ndfleet.d": "from ndfleet import a\n", "ndfleet": ""}
    assert import_cycles(sources) == [["ndfleet.a", "ndfleet.b", "ndfleet.c"]]


# Only ndfleet.azure talks HTTP: every other reader goes through its bounded transport (deadline, byte cap, capped
# Retry-After, tokens only to their own host), so the next reader is bounded by construction.
HTTP_HOME = "ndfleet.azure"
HTTP_MODULES = ("urllib.request", "http.client", "requests", "urllib3", "httpx", "aiohttp")
HTTP_CONSTRUCTORS = ("PipelineClient", "ARMPipelineClient", "AsyncPipelineClient", "HTTPConnection",
                     "HTTPSConnection", "RequestsTransport")


def own_connections(sources: Mapping[str, str]) -> list[str]:
    """`module:line what` for every HTTP library imported, or pipeline client built, outside ndfleet.azure."""
    problems = []
    for module, source in sorted(sources.items()):
        if module == HTTP_HOME or module.startswith(HTTP_HOME + "."):
            continue
        for node in ast.walk(ast.parse(source)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if called in HTTP_CONSTRUCTORS:
                    problems.append(f"{module}:{node.lineno} builds {called}")
            for name in names:
                if any(name == m or name.startswith(m + ".") for m in HTTP_MODULES) or name.endswith(
                    tuple("." + c for c in HTTP_CONSTRUCTORS)
                ):
                    problems.append(f"{module}:{node.lineno} imports {name}")
    return problems


def test_no_reader_opens_its_own_http_connection() -> None:
    assert not own_connections(package_sources())


def test_an_own_connection_is_reported() -> None:
    sources = {"ndfleet.cost.retail": "import urllib.request\n",
               "ndfleet.status.prometheus": "from azure.core import PipelineClient\nc = PipelineClient('x')\n",
               "ndfleet.azure.http": "import http.client\n"}
    assert own_connections(sources) == [
        "ndfleet.cost.retail:1 imports urllib.request",
        "ndfleet.status.prometheus:1 imports azure.core.PipelineClient",
        "ndfleet.status.prometheus:2 builds PipelineClient"]


# The components receive every machine's boot data prepared (ndfleet.prepare: bytes and plain values) and render
# none: they import no renderer of boot data and no feature that contributes to it (the node's files, Slurm's, the
# metrics agent's). The figures both sides set live below both, in ndfleet.boot_contract. What a component still takes
# from a feature is a resource's own setting, never boot data, each named here: the Slurm machines' addresses and the
# controller's host name (slurm.conf's), and the alert rules' shape and grouping (the Monitoring component's rules).
COMPONENTS = "ndfleet.components"
FEATURES = ("ndfleet.nodefiles", "ndfleet.slurm", "ndfleet.monitoring")
COMPONENT_MAY_TAKE = {
    "ndfleet.slurm.conf": frozenset({"controller_host", "slurm_addresses"}),
    "ndfleet.monitoring.alerts": frozenset({"AZURE_SEVERITY", "EVALUATION_INTERVAL_MINUTES", "Alert", "alerts",
                                            "rule_groups"}),
}


def component_feature_imports(sources: Mapping[str, str]) -> list[str]:
    """`component:line what` for every feature or renderer a component imports (a lazy import counts), but the
    names COMPONENT_MAY_TAKE allows."""
    problems = []
    for module, source in sorted(sources.items()):
        if not (module == COMPONENTS or module.startswith(COMPONENTS + ".")):
            continue
        for node in ast.walk(ast.parse(source)):
            taken: list[tuple[str, str | None]] = []
            if isinstance(node, ast.Import):
                taken = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                taken = [(node.module, alias.name) for alias in node.names]
            for imported, name in taken:
                full = f"{imported}.{name}" if name else imported
                if not any(full == f or full.startswith(f + ".") for f in FEATURES):
                    continue
                if name is not None and name in COMPONENT_MAY_TAKE.get(imported, ()):
                    continue
                problems.append(f"{module}:{node.lineno} imports {full}")
    return problems


def test_components_import_no_renderer_or_feature() -> None:
    assert not component_feature_imports(package_sources())


def test_a_component_importing_a_renderer_is_reported() -> None:
    sources = {
        "ndfleet.components.slurm": "def f():\n    from ndfleet.slurm.machines import machine_bootstrap\n",
        "ndfleet.components.vault": "from ndfleet.nodefiles.nodebundle import slot_values\nimport ndfleet.monitoring\n",
        "ndfleet.components.cluster": "from ndfleet.slurm.conf import slurm_addresses, render\n"
        "from ndfleet import slurm\nfrom ndfleet.prepare import PreparedCluster\n",
        "ndfleet.prepare": "from ndfleet.slurm.machines import machine_bootstrap\n",
    }
    assert component_feature_imports(sources) == [
        "ndfleet.components.cluster:1 imports ndfleet.slurm.conf.render",
        "ndfleet.components.cluster:2 imports ndfleet.slurm",
        "ndfleet.components.slurm:2 imports ndfleet.slurm.machines.machine_bootstrap",
        "ndfleet.components.vault:1 imports ndfleet.nodefiles.nodebundle.slot_values",
        "ndfleet.components.vault:2 imports ndfleet.monitoring",
    ]
