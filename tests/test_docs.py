"""The README and the pages under docs/ stay true to the code.

Every ``handrail ...`` command they show exists, every ``--option`` shown with a command is one of
that command's options (read from its ``--help``, so nested ``--sac.*`` and ``--loop.*`` options
count), every ``name:=value`` given to ``handrail launch`` is declared by its launch file, every
relative link resolves, every file under docs/ can be reached from the README, and the README
stays short enough to read as the front door.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from handrail.launch.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 200

_TOP_LEVEL_OPTIONS = frozenset({"-h", "--help", "-V", "--version"})
_NESTED = {"--train-args": ("train",), "--bc-args": ("bc",)}
"""Bench options whose value is a command line of another command (checked against that one)."""
_OTHER_TOOLS = frozenset({"--system-site-packages"})
"""Options of other tools (python -m venv) that the docs name on their own."""
_SEPARATORS = frozenset({"&&", "||", ";", "&", "|"})
"""Shell words that end a command."""
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_INLINE = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_OPTION = re.compile(r"--[a-z][\w.*-]*")
_HELP_OPTION = re.compile(r"^(?:[│|] | {2})(-{1,2}[a-zA-Z][\w.-]*(?:, -{1,2}[a-zA-Z][\w.-]*)*)")


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def _code(text: str) -> Iterator[str]:
    """The code a page shows: each command of its fenced blocks (backslash continuations
    joined) and each inline code span (a table's ``\\|`` read as ``|``)."""
    for block in _FENCE.findall(text):
        yield from block.replace("\\\n", " ").splitlines()
    for match in _INLINE.finditer(_FENCE.sub("", text)):
        yield match.group(2).replace("\\|", "|").replace("\n", " ")


def _tokens(code: str) -> list[str]:
    """The shell words of ``code``, comments left out."""
    try:
        return shlex.split(code, comments=True)
    except ValueError:  # an unbalanced quote: read it word by word
        return code.split()


def _commands(code: str) -> Iterator[list[str]]:
    """The words after each ``handrail`` that starts a command in ``code`` (``ros2 launch
    handrail FILE ...`` as ``launch FILE ...``), up to a shell separator."""
    tokens = _tokens(code)
    starts = True  # whether tokens[i] is where a shell command starts
    for i, token in enumerate(tokens):
        ros2_launch = tokens[max(i - 2, 0) : i] == ["ros2", "launch"]
        if (starts or ros2_launch) and (token == "handrail" or token.endswith("/handrail")):
            rest = tokens[i + 1 :]
            end = next((j for j, t in enumerate(rest) if t in _SEPARATORS), len(rest))
            if rest[:end]:
                yield ["launch", *rest[:end]] if ros2_launch else rest[:end]
        # an environment assignment (MUJOCO_GL=egl) keeps the command's start after it
        starts = token in _SEPARATORS or (
            starts and re.fullmatch(r"[A-Z_]+=\S*", token) is not None
        )


def _resolve(words: list[str]) -> tuple[list[tuple[str, ...]], list[str]] | str | None:
    """The command keys ``words`` name (several for ``info|validate``) and the words after
    them; a string saying what is wrong; None for a placeholder or a bare group."""
    first = words[0]
    if first.startswith("-"):
        return None if first in _TOP_LEVEL_OPTIONS else f"handrail has no option {first}"
    if not re.fullmatch(r"[a-z][\w-]*(\|[a-z][\w-]*)*", first):
        return None  # a placeholder such as COMMAND
    groups = {key[0] for key in COMMANDS if len(key) == 2}
    keys: list[tuple[str, ...]] = []
    for name in first.split("|"):
        if (name,) in COMMANDS:
            keys.append((name,))
        elif name not in groups:
            return f"no command 'handrail {name}'"
        elif len(words) < 2 or words[1] == "..." or words[1].startswith("-"):
            return None  # the group itself (handrail bench ...)
        else:
            for sub in words[1].split("|"):
                if (name, sub) not in COMMANDS:
                    return f"no command 'handrail {name} {sub}'"
                keys.append((name, sub))
    return keys, words[len(keys[0]) :]


@functools.cache
def _options(key: tuple[str, ...]) -> frozenset[str]:
    """The options ``handrail KEY --help`` lists (parsed once per command, in this process)."""
    out = io.StringIO()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": "80"}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(out),
        contextlib.suppress(SystemExit),
    ):
        main([*key, "--help"])
    found = {
        name.strip()
        for line in out.getvalue().splitlines()
        if (match := _HELP_OPTION.match(line))
        for name in match.group(1).split(",")
    }
    assert "--help" in found or "--print" in found, out.getvalue()
    return frozenset(found)


def _known(option: str, options: frozenset[str]) -> bool:
    """Whether ``option`` (or a pattern such as ``--sac.*``) is among ``options``."""
    if option.endswith("*"):
        return any(name.startswith(option[:-1]) for name in options)
    return option in options


def _launch_problems(words: list[str]) -> list[str]:
    """``name:=value`` arguments that ``handrail launch FILE`` does not declare."""
    from handrail.launch.ros.launch_xml import arguments
    from handrail.launch.ros.runner import resolve

    files = [w for w in words if not w.startswith("-") and ":=" not in w]
    if not files or not re.fullmatch(r"[\w./-]+\.launch\.xml", files[0]):
        return []
    declared = {name for name, _, _ in arguments(resolve(files[0]))}
    given = [w.partition(":=")[0] for w in words if re.match(r"[a-z_]\w*:=", w)]
    return [f"{files[0]} declares no argument {name}" for name in given if name not in declared]


def _option_problems(key: tuple[str, ...], words: list[str]) -> list[str]:
    """Options in ``words`` that ``handrail KEY`` does not have; the value of ``--train-args``
    (one word: ``--train-args="--sac.utd 4"``) is checked against ``handrail train``."""
    problems = _launch_problems(words) if key == ("launch",) else []
    nested: tuple[str, ...] | None = None  # the command the next word is a command line of
    for word in words:
        if nested is not None:
            problems += _option_problems(nested, word.split())
            nested = None
            continue
        name, sep, value = word.lstrip("[('\"").partition("=")
        if (match := _OPTION.match(name)) is None:
            continue
        if not _known(match.group(0), _options(key)):
            problems.append(f"'handrail {' '.join(key)}' has no option {match.group(0)}")
        if match.group(0) in _NESTED:
            if sep:
                problems += _option_problems(_NESTED[match.group(0)], value.split())
            else:
                nested = _NESTED[match.group(0)]
    return problems


def _named_commands() -> Iterator[tuple[Path, list[str]]]:
    for page in _pages():
        for code in _code(page.read_text()):
            for words in _commands(code):
                yield page, words


def test_readme_is_short() -> None:
    """The README is the front door: what it is, two commands, what you can do, where to read
    on. Everything else has a page under docs/."""
    lines = len(README.read_text().splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move topics to docs/"


def test_every_command_named_exists() -> None:
    problems = [
        f"{page.relative_to(ROOT)}: {found}: handrail {' '.join(words)}"
        for page, words in _named_commands()
        if isinstance(found := _resolve(words), str)
    ]
    assert not problems, "\n".join(problems)


def test_every_option_named_with_a_command_exists() -> None:
    """``--sac.utd`` and ``--loop.warmup-steps`` included; ``--train-args=...``'s options are
    ``handrail train``'s; ``--sac.*`` stands for any of them."""
    problems = []
    for page, words in _named_commands():
        found = _resolve(words)
        if isinstance(found, tuple):
            keys, rest = found
            problems += [
                f"{page.relative_to(ROOT)}: {problem}"
                for key in keys
                for problem in _option_problems(key, rest)
            ]
    assert not problems, "\n".join(sorted(set(problems)))


def test_every_option_named_alone_exists() -> None:
    """An option in prose (``--loop.takeover-penalty P``) is an option of some command."""
    every = frozenset().union(*(_options(key) for key in COMMANDS))
    problems = [
        f"{page.relative_to(ROOT)}: no command has {name}"
        for page in _pages()
        for code in _code(page.read_text())
        if code.startswith("--")
        for option in _OPTION.findall(code)
        if (name := option.partition("=")[0]) not in _OTHER_TOOLS and not _known(name, every)
    ]
    assert not problems, "\n".join(sorted(set(problems)))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def _links(page: Path) -> Iterator[tuple[Path, str]]:
    """Each relative link of ``page`` (code left out): the path it points at, and its anchor."""
    text = _INLINE.sub("", _FENCE.sub("", page.read_text()))
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        yield (page.parent / path).resolve() if path else page, anchor


def test_every_relative_link_resolves() -> None:
    problems = []
    for page in _pages():
        for target, anchor in _links(page):
            where = f"{page.relative_to(ROOT)} -> {os.path.relpath(target, ROOT)}"
            if not target.exists():
                problems.append(f"{where}: no such file")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                problems.append(f"{where}#{anchor}: no such heading")
    assert not problems, "\n".join(problems)


def test_every_docs_file_is_reachable_from_the_readme() -> None:
    """Every page and plot under docs/ is linked from the README or from a page it reaches."""
    seen, todo = {README}, [README]
    while todo:
        for target, _ in _links(todo.pop()):
            if target not in seen and target.exists():
                seen.add(target)
                if target.suffix == ".md":
                    todo.append(target)
    orphans = sorted(
        str(p.relative_to(ROOT)) for p in DOCS.rglob("*") if p.is_file() and p not in seen
    )
    assert not orphans, f"not linked from the README or a page it links: {orphans}"
