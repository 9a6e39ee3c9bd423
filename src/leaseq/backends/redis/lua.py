"""The Lua scripts, loaded once from ``scripts/*.lua`` with ``importlib.resources``.

Each script's text is ``_common.lua`` (the key schema and shared helpers) followed by the
operation's own file; its SHA1 is what ``EVALSHA`` names. The runners register a script
with ``SCRIPT LOAD`` the first time the server answers ``NOSCRIPT`` (a restarted or
flushed server forgets them), and ``migrate()`` loads them all up front.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

PACKAGE = "leaseq.backends.redis"
COMMON = "_common.lua"


@dataclass(frozen=True)
class Script:
    name: str
    text: str
    sha: str


def load_scripts() -> dict[str, Script]:
    """``{operation: Script}`` for every ``scripts/<operation>.lua`` but the library."""
    folder = resources.files(PACKAGE).joinpath("scripts")
    common = folder.joinpath(COMMON).read_text("utf-8")
    scripts = {}
    for entry in folder.iterdir():
        if entry.name.endswith(".lua") and entry.name != COMMON:
            name = entry.name[: -len(".lua")]
            text = f"{common}\n{entry.read_text('utf-8')}"
            sha = hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()
            scripts[name] = Script(name, text, sha)
    return scripts


SCRIPTS = load_scripts()
