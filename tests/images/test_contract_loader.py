"""The image contracts load, with their sources, and a file of the wrong shape is refused with a named error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ndfleet import images
from ndfleet.images import ImageContractError, load, load_text

IMAGES = Path(images.__file__).resolve().parent


def test_both_images_have_a_contract() -> None:
    assert images.names() == ["ubuntu-hpc-2204", "ubuntu-server-2204"]


def test_compute_contract() -> None:
    c = load("ubuntu-hpc-2204")
    assert c.image == "microsoft-dsvm:ubuntu-hpc:2204" and c.roles == ("compute",)
    assert c.python_version == "3.10"
    hpcx = c.environments["hpcx"]
    assert hpcx.load == "hpcx_load" and hpcx.init.endswith("/hpcx-init.sh")
    assert any(d.endswith("/ompi/lib") for d in hpcx.lib_dirs)
    arp = c.tool("all_reduce_perf")
    assert arp is not None and arp.path == "/opt/nccl-tests/build/all_reduce_perf"
    assert arp.env == "hpcx" and arp.needs_libs == ("libmpi.so.40",)
    assert "nvbandwidth" in c.absent_names and "blobfuse2" in c.absent_names
    assert [h.name for h in c.held_packages][0] == "pmix"
    assert c.apt_sources[0].suite == "insiders"


def test_plain_contract_has_no_hpc_stack() -> None:
    c = load("ubuntu-server-2204")
    assert set(c.roles) == {"controller", "login"}
    assert {"python3", "curl"} <= c.tool_names
    assert {"hpcx", "libpmix.so.2", "all_reduce_perf", "nvidia-smi"} <= c.absent_names
    assert c.environments == {}


@pytest.mark.parametrize("name", images.names())
def test_every_fact_has_a_source(name: str) -> None:
    c = load(name)
    entries = [*c.tools, *c.libraries, *c.absent, *c.held_packages, *c.apt_sources, *c.environments.values()]
    assert entries
    for e in entries:
        assert e.source.startswith("https://"), e
    assert all(url.startswith("https://") for url in c.sources.values())


def _broken(change: str) -> str:
    doc = json.loads((IMAGES / "ubuntu-hpc-2204.json").read_text())
    if change == "tool without path":
        del doc["tools"][0]["path"]
    elif change == "unknown env":
        doc["tools"][0]["env"] = "spack"
    elif change == "libs without env":
        doc["tools"][0]["needs_libs"] = ["libmpi.so.40"]
        doc["tools"][0].pop("env", None)
    elif change == "lib_dirs not a list":
        doc["environments"]["hpcx"]["lib_dirs"] = "/opt/hpcx/ompi/lib"
    elif change == "tool also absent":
        doc["absent"].append({"name": doc["tools"][0]["name"], "why": "x", "source": "https://example.org"})
    elif change == "no tools":
        del doc["tools"]
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ("tool without path", "tools[0].path"),
        ("unknown env", "tools[0].env"),
        ("libs without env", "tools[0].needs_libs"),
        ("lib_dirs not a list", "environments.hpcx.lib_dirs"),
        ("tool also absent", "absent"),
        ("no tools", "tools"),
    ],
)
def test_wrong_shape_is_refused_by_name(change: str, key: str) -> None:
    with pytest.raises(ImageContractError, match=re.escape(f"x.json: {key}: expected")):
        load_text(_broken(change), "x.json")


def test_not_json_and_unknown_name() -> None:
    with pytest.raises(ImageContractError, match="x.json: not JSON"):
        load_text("{", "x.json")
    with pytest.raises(ImageContractError, match="no image contract named 'windows'"):
        load("windows")


def test_docs_restate_the_contracts() -> None:
    docs = IMAGES.parent.parent / "docs"
    assert "(images.md)" in (docs / "sources.md").read_text()
    page = (docs / "images.md").read_text()
    for name in images.names():
        c = load(name)
        assert f"ndfleet/images/{name}.json" in page and c.image in page
        for absent in c.absent:
            assert absent.name.lower() in page.lower() or absent.name == "hpcx", absent.name
    hpc = load("ubuntu-hpc-2204")
    assert hpc.environments["hpcx"].home in page
    for commit_url in hpc.sources.values():
        if "/tree/" in commit_url:
            assert commit_url.rsplit("/", 1)[1] in page, commit_url
