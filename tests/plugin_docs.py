"""The minimal plugins docs/plugins.md shows, read from the page (so that a test using them fails when the
page drifts): its Python blocks that start with ``# <path>.py``, its entry-point TOML blocks, and each
Python block loaded as a module."""
from __future__ import annotations

import re
import sys
import tomllib
import types
from pathlib import Path

#: the page with the minimal plugin examples
PAGE = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
#: a Markdown code block: its language and its text
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def plugin_examples() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """``(files, entry_points)``: the page's Python blocks that start with ``# <path>.py`` by path, and its
    TOML blocks' entry-point groups (``group -> {name: "module:attribute"}``)."""
    files, groups = {}, {}
    for language, text in BLOCK.findall(PAGE.read_text(encoding="utf-8")):
        first = text.splitlines()[0]
        if language == "python" and re.fullmatch(r"# [\w/]+\.py", first):
            files[first[2:]] = text
        elif language == "toml":
            groups.update(tomllib.loads(text)["project"]["entry-points"])
    return files, groups


def plugin_target(group: str) -> tuple[str, object]:
    """``(name, object)``: the page's only entry point of ``group`` and the object it names, loaded from the
    page's code (as module ``mypkg.<file>``, registered in ``sys.modules`` so that pickling by name works)."""
    files, groups = plugin_examples()
    (name, target), = groups[group].items()
    module_name, _, attribute = target.partition(":")
    path = module_name.replace(".", "/") + ".py"
    if module_name not in sys.modules:
        sys.modules.setdefault("mypkg", types.ModuleType("mypkg"))
        module = types.ModuleType(module_name)
        module.__file__ = str(PAGE)
        sys.modules[module_name] = module
        exec(compile(files[path], f"{PAGE}:{path}", "exec"), module.__dict__)
    return name, getattr(sys.modules[module_name], attribute)
