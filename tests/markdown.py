"""What the docs tests read in the project's Markdown: fenced blocks, relative links, headings.

Only the Markdown this project writes: fences of three backticks, inline links, ATX headings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUNNABLE = "runnable"
"""The word after a fence's language that marks a shell block for the docs test to run."""
INSTALL = "install"
"""The word after a fence's language that marks a shell block installing rlcd: the docs test
runs it once, into a fresh venv, before a page's runnable blocks (the slow test only)."""

_FENCE = re.compile(r"^```(.*)$")
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Block:
    """A fenced block: its info string (``sh runnable``), its text and its first line."""

    info: str
    text: str
    line: int

    @property
    def runnable(self) -> bool:
        return self._shell_marked(RUNNABLE)

    @property
    def installs(self) -> bool:
        return self._shell_marked(INSTALL)

    def _shell_marked(self, word: str) -> bool:
        words = self.info.split()
        return len(words) >= 2 and words[0] in {"sh", "bash"} and word in words[1:]


def doc_files() -> list[Path]:
    """README.md and every page of docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text``, in order."""
    found: list[Block] = []
    info: str | None = None
    start = 0
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if info is None and fence:
            info, start, body = fence.group(1).strip(), number, []
        elif info is not None and line.strip() == "```":
            found.append(Block(info, "\n".join(body) + "\n", start))
            info = None
        elif info is not None:
            body.append(line)
    return found


def prose(text: str) -> str:
    """``text`` without its fenced blocks (links and headings live outside them)."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if not inside:
            out.append(line)
    return "\n".join(out)


def links(text: str) -> list[str]:
    """The targets of the inline links of ``text``, outside code blocks and code spans."""
    without_spans = re.sub(r"`[^`\n]*`", "", prose(text))
    return _LINK.findall(without_spans)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of ``text``."""
    found: set[str] = set()
    for line in prose(text).splitlines():
        heading = _HEADING.match(line)
        if heading:
            title = heading.group(1).lower().replace("`", "")
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found
