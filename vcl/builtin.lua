-- builtin.lua: the default policy, surogat's builtin.vcl.
--
-- Each hook here runs when the policy script has no such hook, or when
-- the script's hook returns nothing (nil).  It is compiled into surogatd;
-- this file is its source.  It says what the built-in C policy does when
-- no script is loaded (src/req/req_cache.c).

-- GET and HEAD without credentials are looked up; PURGE purges (purge_acl
-- applies); everything else goes to the backend.
function recv(req)
    if req.method == "PURGE" then
        return "purge"
    end
    if req.method ~= "GET" and req.method ~= "HEAD" then
        return "pass"
    end
    if req.http.authorization or req.http.cookie then
        return "pass"
    end
    return "hash"
end

-- The cache key: Host (lower case) and the request-target, built in C.
-- Nothing to add here: returning nil keeps the built-in key.
function hash(req)
end

-- What is stored, and for how long, is decided by RFC 9111 before this
-- hook runs (beresp.ttl, beresp.uncacheable): deliver that decision.
function backend_response(bereq, beresp)
    return "deliver"
end

-- A fresh (or graceful) object was found: deliver it.
function hit(req, obj)
    return "deliver"
end

-- Nothing usable cached: fetch it, and store what may be stored.
function miss(req)
    return "fetch"
end

-- The request goes to the backend and its response is not stored.
function pass(req)
    return "fetch"
end

-- After the response was sent: nothing to do.
function log(req, resp)
end

-- A synthetic response (surogat.synth(), or a failed hook's 503): send it
-- as built.  resp.body is its page.
function synth(req, resp)
    return "deliver"
end

-- The request about to go to the backend (bereq, editable): send it.
function backend_fetch(bereq)
    return "fetch"
end

-- The backend failed (no answer, a bad one, a timeout): the plain error
-- page (503, 502 or 504), or the stale copy where stale-if-error allows.
function backend_error(bereq, beresp)
    return "abandon"
end

-- recv said "pipe": connect and copy bytes both ways.
function pipe(req, bereq)
    return "pipe"
end

-- After a purge: the built-in answer ("200 Purged", with the count).
function purge(req)
end
