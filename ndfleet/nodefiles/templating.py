"""The one Jinja2 set-up every renderer uses: StrictUndefined (a missing value is an error, never an empty
string), whitespace control for config files, no HTML escaping, and a `shq` filter that shell-quotes a value.

Templates only place values from a plain context; the decisions are made in Python before rendering.
"""

from __future__ import annotations

import functools
import shlex
from pathlib import Path

import jinja2

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"


@functools.cache
def environment(folder: Path = TEMPLATES_DIR, *, hash_comments: bool = False) -> jinja2.Environment:
    """A Jinja2 environment over `folder`. `hash_comments`: Jinja comments are `{## ... ##}`, so that shell
    and YAML templates can carry `{#` literally (e.g. `${#array[@]}`)."""
    comments = {"comment_start_string": "{##", "comment_end_string": "##}"} if hash_comments else {}
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        auto_reload=False,
        **comments,  # type: ignore[arg-type]
    )
    env.filters["shq"] = lambda v: shlex.quote(str(v))
    return env
