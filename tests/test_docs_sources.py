"""The repository stands alone: nothing points outside it, and the facts page it points to is there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
TEXT_SUFFIXES = {".md", ".py", ".j2", ".yaml", ".yml", ".toml", ".sh", ".txt", ".json", ".cfg", ".ini", ""}
# Written in two halves so this file does not match itself.
OUTSIDE = re.compile("|".join(re.escape(a + b) for a, b in (("shared/", "reference"), ("../", "shared"))))


def _repository_text_files() -> list[Path]:
    files = []
    for path in REPO.rglob("*"):
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in path.relative_to(REPO).parts):
            continue
        small_text = path.suffix in TEXT_SUFFIXES and path.is_file() and path.stat().st_size < 2_000_000
        if small_text and not path.is_symlink():
            files.append(path)
    return files


def test_nothing_points_outside_the_repository() -> None:
    offenders = []
    for path in _repository_text_files():
        text = path.read_text(errors="replace")
        offenders += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert offenders == []


def test_readme_points_to_the_sources_page() -> None:
    readme = (REPO / "README.md").read_text()
    assert "(docs/sources.md)" in readme
    sources = (REPO / "docs" / "sources.md").read_text()
    for heading in ("## VM sizes", "## InfiniBand islands", "## Deployment permissions", "## Prices",
                    "## Deployment constraints (issue 13)"):
        assert heading in sources


def test_every_link_of_the_sources_page_is_a_public_url_or_a_repository_file() -> None:
    sources = (REPO / "docs" / "sources.md").read_text()
    for target in re.findall(r"\]\(([^)]+)\)", sources):
        if target.startswith("https://"):
            continue
        assert (REPO / "docs" / target.split("#")[0]).exists(), target


def _budget(level: str, dcgm: int) -> int:
    from ndfleet.nodefiles.bootstrap import validation_budget_s
    from ndfleet.stackconfig.config import load_spec
    from tests.conftest import base_config

    config = base_config()
    config["health"] = {"validationLevel": level, "dcgmLevel": dcgm}
    return validation_budget_s(load_spec(config, "docs"))


def test_boot_to_validated_figures_in_the_docs_are_the_computed_budgets() -> None:
    """docs/bootstrap.md and docs/sources.md quote the validation budget; they must quote what the code computes."""
    figures = [f"{_budget(level, dcgm):,} s" for level, dcgm in (("quick", 1), ("full", 1), ("full", 2), ("full", 3))]
    for doc in (REPO / "docs" / "bootstrap.md", REPO / "docs" / "sources.md"):
        text = doc.read_text()
        missing = [f for f in figures if f not in text]
        assert missing == [], f"{doc.name} does not quote the computed budgets {missing}"
