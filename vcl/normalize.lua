-- normalize.lua: a worked example of a surogat policy (surogat-lua(7)).
--
--   surogatd -b 127.0.0.1:8080 -f vcl/normalize.lua
--
-- Requests that differ only in ways the site ignores share one cached
-- object; static assets are kept a day whatever the backend says;
-- internal headers do not leak to clients.

function recv(req)
    -- Host: lower case, without the default port.
    if req.http.host then
        req.http.host = re.sub(req.http.host:lower(), ":80$", "")
    end

    -- Tracking parameters do not change the page: drop them, and a
    -- query string left empty.
    if re.match(req.url, "[?&](utm_[a-z]+|gclid|fbclid)=") then
        req.url = re.gsub(req.url, "(?<=[?&])(utm_[a-z]+|gclid|fbclid)=[^&]*&?", "")
        req.url = re.sub(req.url, "[?&]$", "")
    end

    -- A health check is answered here, without the backend.
    if req.url == "/healthz" then
        return surogat.synth(200, "ok")
    end

    -- Static assets do not depend on cookies: drop them so they are cached.
    if re.match(req.url, "\\.(css|js|png|jpe?g|gif|svg|woff2?|ico)(\\?.*)?$") then
        req.http.cookie = nil
        req.ctx.static = true
        return "hash"
    end

    -- Only analytics cookies?  Then the page is the same for everyone.
    if req.http.cookie and not re.match(req.http.cookie, "(^|;\\s*)(session|auth)=") then
        req.http.cookie = nil
    end

    -- Everything else: builtin.lua (GET and HEAD without credentials are
    -- looked up, the rest passes, PURGE purges).
end

function hash(req)
    -- Mobile and desktop pages differ: one object for each.
    local ua = req.http.user_agent or ""
    surogat.hash_data(re.match(ua, "(?i)mobile|android|iphone") and "mobile" or "desktop")
    -- nil: the built-in key (Host and URL) followed by that piece.
end

function backend_response(bereq, beresp)
    if req_static_url(bereq.url) and beresp.status == 200 then
        beresp.http["Set-Cookie"] = nil
        beresp.ttl = 86400
        beresp.grace = 3600
    end
    -- An error page is kept for ten seconds at most, to spare the backend.
    if beresp.status >= 500 then
        beresp.ttl = math.min(beresp.ttl, 10)
    end
end

function deliver(req, resp)
    resp.http["X-Powered-By"] = nil
    resp.http.server = nil
    if req.ctx.static then
        resp.http["X-Static"] = "1"
    end
end

function req_static_url(url)
    return re.match(url, "\\.(css|js|png|jpe?g|gif|svg|woff2?|ico)(\\?.*)?$")
end
