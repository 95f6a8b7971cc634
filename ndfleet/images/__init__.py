"""The image contracts: what each VM image ndfleet deploys holds (and lacks) that ndfleet relies on, as data.

One JSON file per image version in this package, each fact with its primary source, read at the build that made
that version: `<name>.json` is what `latest` gets (the newest build read), `<name>@<version>.json` a pinned
marketplace version (`ubuntu-hpc-2204@22.04.2024102301.json`, built from azhpc-images tag ubuntu-hpc-20241023).
`ubuntu-hpc-2204` is the compute nodes' image, `ubuntu-server-2204` the controller and login nodes'. docs/images.md
says what they hold and how they are used. The tests hold the node program to every compute contract
(tests/images), and the test twin builds its stand-in images from the contract of the version its stack pins.

`load(name, version)` reads one contract and checks its shape; a file of the wrong shape raises
`ImageContractError` naming the file and the key. `for_image(urn)` is the contract a stack's `ndfleet:image` gets,
with a warning when that version has no contract of its own; `agreed(name, fact)` is one fact every contracted
version of an image shares (what ndfleet renders once for all of them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from ndfleet.regularfile import NotARegularFile, read_regular_file

__all__ = [
    "COMPUTE_IMAGE",
    "SERVER_IMAGE",
    "Absent",
    "LATEST",
    "AptSource",
    "BootService",
    "Environment",
    "HeldPackage",
    "ImageContract",
    "ImageContractError",
    "Library",
    "Tool",
    "CONTRACT_FILE_LIMIT",
    "RENDERED_ONCE",
    "agreed",
    "all_reduce_perf_path",
    "contract_names",
    "for_image",
    "hpcx_init_glob",
    "load",
    "load_text",
    "names",
    "resolve_declared",
    "versions",
]


# The images ndfleet deploys by default: the Azure HPC image on the compute nodes (ndfleet.stackconfig.settings
# DEFAULT_IMAGE), Canonical's Ubuntu Server on the controller and login nodes (components/slurm_host.py).
COMPUTE_IMAGE = "ubuntu-hpc-2204"
SERVER_IMAGE = "ubuntu-server-2204"
# The version `<name>.json` describes: what an unpinned image gets (the newest build of the image ndfleet has read).
LATEST = "latest"
# The most a team's contract file may hold (ndfleet's own are under 20 KB): a larger file is refused, not read whole.
CONTRACT_FILE_LIMIT = 256 * 1024


class ImageContractError(ValueError):
    """An image contract file is missing or not of the expected shape; the message names the file and the key."""


@dataclass(frozen=True)
class Environment:
    """A software environment that has to be loaded before some tools run (HPC-X: `source init; load`)."""

    name: str
    init: str
    load: str
    lib_dirs: tuple[str, ...]
    source: str
    init_glob: str = ""  # what a node should look for: any version (the node JSON's burnin.hpcx_init)
    home: str = ""  # the folder it lives in; its programs are reached only through `load`, never on PATH


@dataclass(frozen=True)
class Tool:
    name: str
    path: str
    source: str
    env: str = ""  # an entry of `environments` that must be loaded for the tool to run
    needs_libs: tuple[str, ...] = ()  # sonames only that environment's lib_dirs provide
    kind: str = "program"  # or "service": a systemd unit (path is its unit file), not something to exec


@dataclass(frozen=True)
class Library:
    name: str
    path: str
    source: str
    package: str = ""


@dataclass(frozen=True)
class Absent:
    name: str
    why: str
    source: str
    path: str = ""  # where it would be, on an image that has it (the node program looks there)
    env: str = ""  # the environment it would need there (as Tool.env)


@dataclass(frozen=True)
class HeldPackage:
    name: str
    source: str


@dataclass(frozen=True)
class AptSource:
    uri: str
    suite: str
    components: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class BootService:
    """A systemd unit of the image that runs at every boot and writes files ndfleet's set-up may write too: the
    set-up unit is ordered after it (ndfleet.nodefiles.bootstrap), so that the node's version is the one left."""

    name: str  # the unit's name, e.g. sku-customizations.service
    writes: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class ImageContract:
    name: str
    image: str
    version: str  # the marketplace version it describes, or LATEST
    roles: tuple[str, ...]
    sources: dict[str, str]
    python_version: str
    python_source: str
    environments: dict[str, Environment]
    tools: tuple[Tool, ...]
    libraries: tuple[Library, ...]
    absent: tuple[Absent, ...]
    held_packages: tuple[HeldPackage, ...]
    apt_sources: tuple[AptSource, ...]
    boot_services: tuple[BootService, ...] = ()

    @property
    def urn(self) -> str:
        return f"{self.image}:{self.version}"

    def writers_of(self, path: str) -> tuple[str, ...]:
        """The image's boot services that write `path`."""
        return tuple(b.name for b in self.boot_services if path in b.writes)

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)

    def absent_entry(self, name: str) -> Absent | None:
        return next((a for a in self.absent if a.name == name), None)

    def off_path_dirs(self, standard: tuple[str, ...]) -> tuple[str, ...]:
        """Folders of the programs (present, or absent here but used where an image has them) that are not among
        the `standard` PATH folders and not inside an environment (those are reached by loading it): what the
        node's PATH must add."""
        homes = tuple(e.home.rstrip("/") + "/" for e in self.environments.values() if e.home)
        paths = [t.path for t in self.tools if t.kind == "program"] + [a.path for a in self.absent if a.path]
        dirs = [p.rsplit("/", 1)[0] for p in paths if not p.startswith(homes)]
        return tuple(d for d in dict.fromkeys(dirs) if d not in standard)

    def needs_env(self, name: str) -> str:
        """The environment the tool `name` needs loaded ("" for none), whether this image has it or not."""
        tool, absent = self.tool(name), self.absent_entry(name)
        return tool.env if tool else absent.env if absent else ""

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.tools)

    @property
    def absent_names(self) -> frozenset[str]:
        return frozenset(a.name for a in self.absent)


class _Reader:
    """Typed access to one JSON object, with errors that say where (file and key path)."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, key: str, want: str, got: Any) -> ImageContractError:
        return ImageContractError(f"{self.where}: {key}: expected {want}, got {got!r}")

    def obj(self, data: Any, key: str) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(key, "an object", data)
        return data

    def text(self, data: dict[str, Any], key: str, path: str, required: bool = True) -> str:
        value = data.get(key, None if required else "")
        if not isinstance(value, str) or (required and not value.strip()):
            raise self.fail(f"{path}.{key}" if path else key, "a non-empty string" if required else "a string", value)
        return value

    def texts(self, data: dict[str, Any], key: str, path: str, required: bool = True) -> tuple[str, ...]:
        value = data.get(key, None if required else [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(f"{path}.{key}" if path else key, "a list of non-empty strings", value)
        return tuple(value)

    def items(self, data: dict[str, Any], key: str) -> list[dict[str, Any]]:
        value = data.get(key)
        if not isinstance(value, list):
            raise self.fail(key, "a list of objects", value)
        return [self.obj(v, f"{key}[{i}]") for i, v in enumerate(value)]


def _parse(data: Any, where: str) -> ImageContract:
    r = _Reader(where)
    doc = r.obj(data, "(top level)")
    sources = r.obj(doc.get("sources"), "sources")
    if not sources or not all(isinstance(k, str) and isinstance(v, str) and v for k, v in sources.items()):
        raise r.fail("sources", "an object of name -> URL", sources)
    python = r.obj(doc.get("python"), "python")
    envs: dict[str, Environment] = {}
    for name, e in r.obj(doc.get("environments"), "environments").items():
        e = r.obj(e, f"environments.{name}")
        p = f"environments.{name}"
        envs[name] = Environment(
            name=name,
            init=r.text(e, "init", p),
            load=r.text(e, "load", p),
            lib_dirs=r.texts(e, "lib_dirs", p),
            source=r.text(e, "source", p),
            init_glob=r.text(e, "init_glob", p, required=False),
            home=r.text(e, "home", p, required=False),
        )
    tools = []
    for i, t in enumerate(r.items(doc, "tools")):
        p = f"tools[{i}]"
        tool = Tool(
            name=r.text(t, "name", p),
            path=r.text(t, "path", p),
            source=r.text(t, "source", p),
            env=r.text(t, "env", p, required=False),
            needs_libs=r.texts(t, "needs_libs", p, required=False),
            kind=r.text(t, "kind", p, required=False) or "program",
        )
        if tool.kind not in ("program", "service"):
            raise r.fail(f"{p}.kind", "'program' or 'service'", tool.kind)
        if tool.env and tool.env not in envs:
            raise r.fail(f"{p}.env", f"one of the environments {sorted(envs)}", tool.env)
        if tool.needs_libs and not tool.env:
            raise r.fail(f"{p}.needs_libs", "an `env` beside it (the environment whose lib_dirs provide them)", None)
        tools.append(tool)
    libraries = [
        Library(
            name=r.text(lib, "name", f"libraries[{i}]"),
            path=r.text(lib, "path", f"libraries[{i}]"),
            source=r.text(lib, "source", f"libraries[{i}]"),
            package=r.text(lib, "package", f"libraries[{i}]", required=False),
        )
        for i, lib in enumerate(r.items(doc, "libraries"))
    ]
    absent = [
        Absent(
            name=r.text(a, "name", f"absent[{i}]"),
            why=r.text(a, "why", f"absent[{i}]"),
            source=r.text(a, "source", f"absent[{i}]"),
            path=r.text(a, "path", f"absent[{i}]", required=False),
            env=r.text(a, "env", f"absent[{i}]", required=False),
        )
        for i, a in enumerate(r.items(doc, "absent"))
    ]
    for i, a in enumerate(absent):
        if a.env and a.env not in envs:
            raise r.fail(f"absent[{i}].env", f"one of the environments {sorted(envs)}", a.env)
    held = [
        HeldPackage(r.text(h, "name", f"held_packages[{i}]"), r.text(h, "source", f"held_packages[{i}]"))
        for i, h in enumerate(r.items(doc, "held_packages"))
    ]
    apt = [
        AptSource(
            uri=r.text(s, "uri", f"apt_sources[{i}]"),
            suite=r.text(s, "suite", f"apt_sources[{i}]"),
            components=r.texts(s, "components", f"apt_sources[{i}]"),
            source=r.text(s, "source", f"apt_sources[{i}]"),
        )
        for i, s in enumerate(r.items(doc, "apt_sources"))
    ]
    boot = [
        BootService(
            name=r.text(b, "name", f"boot_services[{i}]"),
            writes=r.texts(b, "writes", f"boot_services[{i}]"),
            source=r.text(b, "source", f"boot_services[{i}]"),
        )
        for i, b in enumerate(r.items(doc, "boot_services") if "boot_services" in doc else [])
    ]
    both = {t.name for t in tools} & {a.name for a in absent}
    if both:
        raise r.fail("absent", "names not also listed in tools", sorted(both))
    roles = r.texts(doc, "roles", "")
    if not roles:
        raise r.fail("roles", "at least one role", roles)
    return ImageContract(
        name=r.text(doc, "name", ""),
        image=r.text(doc, "image", ""),
        version=r.text(doc, "version", ""),
        roles=roles,
        sources=dict(sources),
        python_version=r.text(python, "version", "python"),
        python_source=r.text(python, "source", "python"),
        environments=envs,
        tools=tuple(tools),
        libraries=tuple(libraries),
        absent=tuple(absent),
        held_packages=tuple(held),
        apt_sources=tuple(apt),
        boot_services=tuple(boot),
    )


def _files() -> dict[tuple[str, str], str]:
    """(name, version) -> file name, for every contract file of this package."""
    out = {}
    for f in resources.files(__name__).iterdir():
        if f.name.endswith(".json"):
            stem = f.name.removesuffix(".json")
            name, _, version = stem.partition("@")
            out[(name, version or LATEST)] = f.name
    return out


def names() -> list[str]:
    """The images that have a contract here."""
    return sorted({name for name, _ in _files()})


def versions(name: str) -> list[str]:
    """The versions of image `name` that have a contract (LATEST among them where `<name>.json` exists)."""
    return sorted(v for n, v in _files() if n == name)


def load_text(text: str, where: str = "<text>") -> ImageContract:
    """A contract from JSON text (ImageContractError when it is not JSON or not of the contract's shape)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ImageContractError(f"{where}: not JSON: {e}") from e
    return _parse(data, where)


def load(name: str, version: str = LATEST) -> ImageContract:
    """The contract of image `name` (e.g. "ubuntu-hpc-2204") at `version`; its `name` and `version` keys must be the
    file's."""
    if name not in names():
        raise ImageContractError(f"no image contract named {name!r}; there are {names()}")
    file = _files().get((name, version))
    if file is None:
        raise ImageContractError(f"no contract of {name!r} at version {version!r}; there are {versions(name)}")
    where = f"ndfleet/images/{file}"
    contract = load_text(resources.files(__name__).joinpath(file).read_text(encoding="utf-8"), where)
    if contract.name != name:
        raise ImageContractError(f"{where}: name: expected {name!r}, got {contract.name!r}")
    if contract.version != version:
        raise ImageContractError(f"{where}: version: expected {version!r} (the file's name), got {contract.version!r}")
    return contract


def hpcx_init_glob(contract: ImageContract) -> str:
    """Where a node looks for HPC-X's init script ("" where the image has none): the node JSON's burnin.hpcx_init."""
    hpcx = contract.environments.get("hpcx")
    return hpcx.init_glob if hpcx else ""


def all_reduce_perf_path(contract: ImageContract) -> str:
    """nccl-tests' all_reduce_perf, which the burn-in runs: the node JSON's path to it ("" where the image lacks it)."""
    tool = contract.tool("all_reduce_perf")
    return tool.path if tool else ""


# The facts ndfleet renders once for every stack (the node JSON is the same for each version of the compute image):
# a team's contract file must agree with ndfleet's contracts on them, or its nodes would look in the wrong place.
RENDERED_ONCE: dict[str, Callable[[ImageContract], str]] = {
    "environments.hpcx.init_glob": hpcx_init_glob,
    "tools[name=all_reduce_perf].path": all_reduce_perf_path,
}


def contract_names() -> list[str]:
    """What `imageContract` may name of ndfleet's own: `<name>` (its latest) and `<name>@<version>` (a pinned one)."""
    return [n if v == LATEST else f"{n}@{v}" for n in names() for v in versions(n)]


def resolve_declared(declared: str, base: Path | None) -> str:
    """A stack's `imageContract` checked: one of contract_names() as given, or a contract file (relative to `base`,
    the stack file's folder) read, bounded, and checked as ndfleet's own contracts are, returned as its absolute
    path. ImageContractError says what is wrong."""
    if declared in contract_names():
        return declared
    name, at, version = declared.partition("@")
    if not declared.endswith(".json"):
        known = ", ".join(contract_names())
        if name in names():
            raise ImageContractError(f"no contract of {name!r} at version {version!r}; there are {known}")
        raise ImageContractError(f"neither one of ndfleet's contracts ({known}) nor a contract file (<path>.json)")
    if base is None and not Path(declared).is_absolute():
        raise ImageContractError("a relative contract file, and no stack file folder to read it from")
    path = (Path(base or "/") / declared).resolve()
    contract = _read_file(path, declared)
    for key, fact in RENDERED_ONCE.items():
        theirs, ours = fact(contract), agreed(COMPUTE_IMAGE, fact)
        if theirs != ours:
            raise ImageContractError(
                f"{declared}: {key}: expected {ours!r}, what ndfleet renders into every node's configuration from its "
                f"own contracts (docs/images.md, \"A team's own image\"), got {theirs!r}"
            )
    return str(path)


def _read_file(path: Path, where: str) -> ImageContract:
    try:
        data = read_regular_file(path, CONTRACT_FILE_LIMIT)
    except (OSError, NotARegularFile) as e:
        raise ImageContractError(f"{where}: cannot be read ({path}): {e}") from e
    if len(data) > CONTRACT_FILE_LIMIT:
        raise ImageContractError(f"{where}: larger than {CONTRACT_FILE_LIMIT} bytes, not a contract")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ImageContractError(f"{where}: not UTF-8 text: {e}") from e
    return load_text(text, where)


def for_image(urn: str, name: str = COMPUTE_IMAGE, declared: str = "") -> tuple[ImageContract, str]:
    """The contract a stack's image URN (publisher:offer:sku:version) gets, and why it is not that image's own ("" when
    it is). `latest` gets `<name>.json`, the newest build read. A pinned version, or another image, without a contract
    gets that same contract, with the reason naming the versions that have one: ndfleet renders the nodes from it, and
    the node program finds what varies between builds (HPC-X's folder) by itself, but nobody has read that build.
    `declared`: the stack's imageContract as resolve_declared returned it (a gallery image's contract, required
    for one): that contract, the team's word for its image."""
    if declared:
        if declared.startswith("/"):
            return _read_file(Path(declared), declared), ""
        contract_name, _, version = declared.partition("@")
        return load(contract_name, version or LATEST), ""
    if urn.startswith("/"):
        raise ImageContractError(f"image {urn!r} is a gallery image: its contract must be declared (imageContract)")
    publisher, _, rest = urn.partition(":")
    offer, _, rest = rest.partition(":")
    sku, _, version = rest.partition(":")
    latest = load(name, LATEST)
    if f"{publisher}:{offer}:{sku}".lower() != latest.image.lower():
        return latest, (
            f"image {urn!r} is not {latest.image!r}, which ndfleet has read: the nodes are set up as for "
            f"{latest.urn} (ndfleet/images, docs/images.md); check that the image has what that contract lists"
        )
    if version.lower() == LATEST:
        return latest, ""
    pinned = [v for v in versions(name) if v != LATEST]
    if version in pinned:
        return load(name, version), ""
    return latest, (
        f"image version {version!r} has no image contract (ndfleet/images; contracted: {', '.join(pinned) or 'none'} "
        f"and latest): the nodes are set up as for latest, the newest build ndfleet has read; pin a contracted "
        "version, or add a contract for this one read from the azhpc-images tag that built it (docs/images.md)"
    )


_T = TypeVar("_T")


def agreed(name: str, fact: Callable[[ImageContract], _T]) -> _T:
    """`fact` of image `name`, which every contracted version must share (ImageContractError naming the versions that
    differ): what ndfleet renders once for every version of the image, and what the node program may rely on."""
    values = {v: fact(load(name, v)) for v in versions(name)}
    first = values[LATEST] if LATEST in values else next(iter(values.values()))
    differ = {v: x for v, x in values.items() if x != first}
    if differ:
        raise ImageContractError(f"{name}: the contracted versions disagree: {values!r}")
    return first
