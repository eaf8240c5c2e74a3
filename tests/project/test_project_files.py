"""Project hygiene: the LICENSE matches pyproject's license, and every relative link in the docs
resolves inside the repository (no link to a document the repository does not ship)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted([REPO / "README.md", REPO / "CHANGELOG.md", *(REPO / "docs").glob("*.md")])
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_license_file_is_the_apache_2_0_text_pyproject_names() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.split()) > 1500, "the full text, not a notice"


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: str(path.relative_to(REPO)))
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    for target in _LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(REPO), f"{doc.name} links outside the repository: {target}"
        assert path.exists(), f"{doc.name} links to a missing file: {target}"


def test_operations_points_to_the_changelog() -> None:
    assert "](../CHANGELOG.md)" in (REPO / "docs" / "operations.md").read_text()
