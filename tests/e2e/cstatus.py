"""Cache-Status (RFC 9211) as surogat sends it on a response that went
forward: `surogat; fwd=REASON[; fwd-status=N][; stored]`."""

import re

_FWD = re.compile(r"surogat; fwd=(uri-miss|vary-miss|miss|stale)(?:; fwd-status=(\d{3}))?"
                  r"(; stored)?")


def forwarded(cs, stored=None, fwd=None):
    """Whether Cache-Status cs says the response was fetched for a miss (of the
    given kind, if fwd is given) and, if stored is given, stored or not."""
    m = _FWD.fullmatch(cs or "")
    if m is None:
        return False
    if fwd is not None and m.group(1) != fwd:
        return False
    return stored is None or bool(m.group(3)) == stored
