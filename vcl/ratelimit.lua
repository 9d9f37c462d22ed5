-- ratelimit.lua: requests per client address, limited.  Past RATE
-- requests a second, with bursts of up to BURST at once, a client gets
-- 429 Too Many Requests with a Retry-After saying when to come back.
--
-- The budgets live in a shared dictionary: every worker draws from the
-- same one, and a reload that declares it alike keeps them.  A client
-- takes about 90 bytes: 10 MB hold over 100,000; when it is full the
-- clients seen least recently are forgotten first (they start again with
-- a full burst).  surogat.ratelimit() is the generic cell rate algorithm: one
-- number per client, no timer.
--
-- client.ip is the address of the connection, or the one a load
-- balancer's PROXY header carries (a listen address with ,PROXY), or,
-- from a peer in trusted_proxies, the client X-Forwarded-For names.
-- Behind a balancer that says neither, every client has the balancer's
-- address and shares one budget.  Exempt addresses go in EXEMPT.
--
-- Usage: surogatd -f ratelimit.lua -b host:port, or copy the recv and
-- synth below into a policy of your own (keep the `shared` line).

shared "ratelimit" { size = "10m" }

-- Per client: 10 a second, 5 at once.  Sized for an API; a site whose
-- pages pull in many images and scripts at once wants a BURST of 50 or
-- more, or to return early in recv for its static files.
local RATE = "10/s"
local BURST = 5

-- Never limited: monitoring, the site's own servers.
local EXEMPT = surogat.acl{ "192.0.2.1/32" }

function recv(req)
    if EXEMPT:match(client.ip) then
        return nil
    end
    local ok, wait = surogat.ratelimit(client.ip, RATE, BURST)
    if not ok then
        -- Whole seconds, rounded up: a client retrying then is let in.
        req.ctx.retry_after = math.max(1, math.ceil(wait))
        return surogat.synth(429, "Too Many Requests")
    end
end

function synth(req, resp)
    if resp.status ~= 429 then
        return nil
    end
    local retry = tostring(req.ctx.retry_after or 1)
    resp.http["Retry-After"] = retry
    resp.http["Cache-Control"] = "no-store"
    resp.http["Content-Type"] = "text/html; charset=utf-8"
    -- The URL comes from the client: escaped, or the page is a way to inject script.
    resp.body = "<!DOCTYPE html>\n<html><head><title>429 Too Many Requests</title></head>\n" ..
        "<body><h1>Too Many Requests</h1>\n<p>Too many requests for " ..
        surogat.html_escape(req.url) .. "; try again in " .. retry ..
        " seconds.</p></body></html>\n"
    return "deliver"
end
