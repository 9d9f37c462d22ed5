"""Cache-Status (RFC 9211) as surogat sends it: `surogat; hit; ttl=N` on a
hit, `surogat; fwd=REASON[; fwd-status=N][; stored | ; detail=WHY]` on a
response that went forward (WHY: the reason it was not stored)."""

import re

_HIT = re.compile(r"surogat; hit; ttl=(-?\d+)")
_FWD = re.compile(r"surogat; fwd=(uri-miss|vary-miss|miss|stale)(?:; fwd-status=(\d{3}))?"
                  r"(?:(; stored)|; detail=([a-z-]+))?")

# A pass for a hit-for-miss marker: the URL's last response was not stored.
HFM = "surogat; fwd=uri-miss; detail=hit-for-miss"


def forwarded(cs, stored=None, fwd=None, detail=None):
    """Whether Cache-Status cs says the response was fetched for a miss (of the
    given kind, if fwd is given) and, if stored is given, stored or not -- and
    then, if detail is given, not stored for that reason."""
    m = _FWD.fullmatch(cs or "")
    if m is None:
        return False
    if fwd is not None and m.group(1) != fwd:
        return False
    if detail is not None and m.group(4) != detail:
        return False
    return stored is None or bool(m.group(3)) == stored


def hit_ttl(r):
    """The ttl of a hit's Cache-Status (negative when served stale), or None
    when response r is not a hit."""
    m = _HIT.fullmatch(r.header("Cache-Status") or "")
    return int(m.group(1)) if m else None


def is_hit(r):
    return hit_ttl(r) is not None
