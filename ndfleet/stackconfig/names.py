"""Stack names, checked as Pulumi checks them, before a name reaches a file path or a rendered script.

Pulumi allows letters, digits, '-', '_' and '.', 1 to 100 characters (pulumi/pulumi,
sdk/go/common/tokens: `stackNameAndProjectRegexp = ^[A-Za-z0-9_.-]{1,100}$`, and the Pulumi docs, "Stacks":
"Stack names may only contain alphanumeric characters, hyphens, underscores, or periods"). A name that passes
holds no newline, quote, slash or shell metacharacter, so it is safe in paths, tags and templates.
"""

from __future__ import annotations

import re

from ndfleet.stackconfig.settings import MAX_NAME_PREFIX, NAMESPACE

STACK_NAME = re.compile(r"[A-Za-z0-9_.-]{1,100}")
STACK_NAME_RULE = "1-100 characters: letters, digits, '-', '_' or '.' (Pulumi's rule for stack names)"


def stack_name_problem(name: str) -> str | None:
    """None for a valid stack name, else the reason (the name shown only when it is printable and short)."""
    if STACK_NAME.fullmatch(name):
        return None
    shown = repr(name) if name.isprintable() and len(name) <= 60 else f"of {len(name)} characters"
    return f"stack name {shown} is not valid: {STACK_NAME_RULE}"


def grafana_name(name_prefix: str) -> str:
    """The Managed Grafana instance's name. Managed Grafana names are short (the portal allows 2-23 letters, digits
    and hyphens, starting with a letter and ending with a letter or digit); Pulumi's auto-name (name + random suffix)
    could run over, so the stack names it. Here, not in the component: a smoke stack checks that its name differs
    from its base's (ndfleet/stackconfig/smoke.py)."""
    return f"{name_prefix[:14].rstrip('-')}-grafana"


def computer_name_prefix(name_prefix: str, island: str) -> str:
    """An island's VM host names start with this (the scale set's computerNamePrefix: components/cluster.py); the
    status and goodput readers and the alerts find an island's nodes by it."""
    return f"{name_prefix}-{island}-"


def _cleaned_prefix(stack: str) -> str:
    # Runs of dashes become one: host names join the prefix, the island and the instance with single dashes.
    cleaned = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", stack.lower())).strip("-") or "ndfleet"
    return cleaned if cleaned[0].isalpha() else "nd" + cleaned


def default_prefix(stack: str) -> str:
    """The resource-name prefix of a stack without `namePrefix`: its name, cleaned (never cut in a deployed stack:
    `default_prefix_problem` refuses a name that would be; the cut here only keeps a refused name's messages short)."""
    return _cleaned_prefix(stack)[:MAX_NAME_PREFIX].rstrip("-")


def default_prefix_problem(stack: str) -> str | None:
    """A stack without `namePrefix` whose name would have to be cut to make its prefix: refused, since a cut prefix
    hides the stack it belongs to (two stacks named alike share it, and with it their host names, which status, the
    alerts and goodput read to tell stacks apart: docs/operations.md, "Which scale sets are the stack's")."""
    cleaned = _cleaned_prefix(stack)
    if len(cleaned) <= MAX_NAME_PREFIX:
        return None
    cut = cleaned[:MAX_NAME_PREFIX].rstrip("-")
    return (
        f"stack name {stack!r} makes a resource-name prefix of {len(cleaned)} characters ({cleaned!r}), and "
        f"{NAMESPACE}:namePrefix allows {MAX_NAME_PREFIX} (it starts every resource and host name); ndfleet does not "
        f"cut it, since a cut prefix ({cut!r}) could be another stack's: set {NAMESPACE}:namePrefix to a prefix of "
        f"at most {MAX_NAME_PREFIX} characters that names this stack alone, or use a shorter stack name"
    )
