"""The README and docs/ stay navigable: every relative link lands on a file (and heading) that
exists, the README stays a short entry point, and no line runs past 100 characters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.markdown import ROOT, anchors, blocks, doc_files, links

DOCS = doc_files()


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", DOCS, ids=_name)
def test_relative_links_resolve(page: Path) -> None:
    text = page.read_text()
    broken: list[str] = []
    for target in links(text):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            broken.append(f"{target}: no such heading in {_name(file)}")
    assert not broken, f"{_name(page)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", DOCS, ids=_name)
def test_lines_fit(page: Path) -> None:
    long = [n for n, line in enumerate(page.read_text().splitlines(), 1) if len(line) > 100]
    assert not long, f"{_name(page)}: lines over 100 characters: {long}"


def test_readme_is_short_and_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    first = blocks(text)[0].text.splitlines()
    assert [line.split("#")[0].strip() for line in first] == [
        "python3 bootstrap.py demo",
        "python3 bootstrap.py test",
    ]


def test_the_quick_start_is_runnable() -> None:
    """The docs test (tests/e2e/test_docs.py) runs something: the README's quick start, from
    its install step on."""
    readme = blocks((ROOT / "README.md").read_text())
    assert any(b.runnable for b in readme)
    assert any(b.installs for b in readme)
