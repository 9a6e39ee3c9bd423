"""The Lua scripts, loaded once from ``scripts/*.lua`` with ``importlib.resources``.

Each script's text is ``_common.lua`` (the key schema and shared helpers) followed by the
operation's own file, run as a function so that an epilogue follows whatever it returns
(``EPILOGUE``: the one PUBLISH of the jobs it finished); its SHA1 is what ``EVALSHA``
names. The runners register a script with ``SCRIPT LOAD`` the first time the server
answers ``NOSCRIPT`` (a restarted or flushed server forgets them), and ``migrate()`` loads
them all up front.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

PACKAGE = "leaseq.backends.redis"
COMMON = "_common.lua"
# The operation's body runs inside main(), so its every ``return`` comes back here first.
# (Lua 5.1 allows main() 60 upvalues, the _common.lua helpers it uses; there are fewer.)
PROLOGUE = "local function main()\n"
EPILOGUE = "\nend\nlocal reply = main()\npublish_finished()\nreturn reply\n"


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
            text = f"{common}\n{PROLOGUE}{entry.read_text('utf-8')}{EPILOGUE}"
            sha = hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()
            scripts[name] = Script(name, text, sha)
    return scripts


SCRIPTS = load_scripts()
