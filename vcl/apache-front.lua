-- apache-front.lua: surogat in front of an Apache httpd serving a site with
-- static files and dynamic pages (PHP, CGI) that log users in with a
-- session cookie (surogat-lua(7)).
--
--   surogatd -b 127.0.0.1:8080 -f vcl/apache-front.lua
--
-- What it does:
--   * static files, by extension: cookies are dropped both ways and the
--     object is kept for a time chosen by its Content-Type, in the manner
--     of mod_expires' ExpiresByType, whatever Apache said;
--   * logged-in users (a session cookie) and Authorization never touch
--     the cache; neither do POST and the other unsafe methods;
--   * analytics cookies (_ga, _gid, __utm*) are removed so that they do
--     not make every page uncacheable; the other cookies are kept, and a
--     request that still has some passes (builtin.lua);
--   * a dynamic page that sets a cookie is never stored;
--   * X-Policy on the response says which rule applied (drop it in
--     deliver if clients must not see it; the x_cache parameter adds
--     X-Cache: HIT/MISS).
--
-- With one backend (-b) static files go to Apache like the rest, and are
-- cached; apache-static.lua declares Apache and the built-in static-file
-- backend and routes static files to the latter, out of Apache's way.

-- Extensions of files that are the same for every user.
local STATIC = "(?i)^[^?#]*\\.(jpe?g|png|gif|webp|svg|ico|css|js|woff2?|ttf|mp4|pdf|zip)(\\?.*)?$"

-- Cookies that say a user is logged in: PHP's session, WordPress, Drupal.
local SESSION = "(^|;)\\s*(PHPSESSID|wordpress_logged_in_[^=]*|S?SESS[0-9a-f]*)="

-- Analytics cookies, which the server never reads.
local TRACKING = "^\\s*(_ga(_[A-Za-z0-9]+)?|_gid|__utm[a-z]*)="

local DAY = 86400

-- Seconds to keep a static file, by Content-Type as ExpiresByType would
-- ("access plus 30 days", ...): the first pattern that matches wins.
local EXPIRES_BY_TYPE = {
    { "^image/", 30 * DAY },
    { "^text/css", 7 * DAY },
    { "^(text|application)/(x-)?javascript", 7 * DAY },
    { "^(font/|application/(x-)?font-|application/vnd\\.ms-fontobject)", 365 * DAY },
    { "^video/", 30 * DAY },
    { "^application/(pdf|zip)", 1 * DAY },
}
-- A static file whose type is none of those (or missing).
local EXPIRES_DEFAULT = 1 * DAY

local function is_static(url)
    return re.match(url, STATIC)
end

-- The Cookie header without the analytics cookies, nil when none is left.
local function strip_tracking(cookie)
    local keep = {}
    for c in cookie:gmatch("[^;]+") do
        if not re.match(c, TRACKING) then
            keep[#keep + 1] = re.sub(c, "^\\s+", "")
        end
    end
    if #keep == 0 then
        return nil
    end
    return table.concat(keep, "; ")
end

function recv(req)
    if req.method ~= "GET" and req.method ~= "HEAD" then
        -- POST and the like pass, PURGE purges: builtin.lua.
        req.ctx.why = "method"
        return nil
    end
    -- Before the static rule: a file behind authentication is not public.
    if req.http.authorization then
        req.ctx.why = "authorization"
        return "pass"
    end
    if is_static(req.url) then
        req.http.cookie = nil
        req.ctx.why = "static"
        return "hash"
    end
    local cookie = req.http.cookie
    if cookie and re.match(cookie, SESSION) then
        req.ctx.why = "session"
        return "pass"
    end
    if cookie then
        req.http.cookie = strip_tracking(cookie)
    end
    -- Cookies left: builtin.lua passes; none: looked up.
    req.ctx.why = req.http.cookie and "cookie" or "page"
end

function backend_response(bereq, beresp)
    if is_static(bereq.url) then
        -- A static file does not log anyone in: a cookie set with it
        -- would be handed to every client of the cached copy.
        beresp.http["Set-Cookie"] = nil
        if beresp.status == 200 then
            local ctype = beresp.http.content_type or ""
            local ttl = EXPIRES_DEFAULT
            for _, e in ipairs(EXPIRES_BY_TYPE) do
                if re.match(ctype, e[1]) then
                    ttl = e[2]
                    break
                end
            end
            beresp.ttl = ttl
        end
        return "deliver"
    end
    if beresp.http.set_cookie then
        -- A page that sets a cookie is someone's: never store it.
        return "pass"
    end
    -- Other pages: RFC 9111 (Cache-Control, Expires) as builtin.lua does.
end

function deliver(req, resp)
    resp.http["X-Policy"] = req.ctx.why
    resp.http["X-Powered-By"] = nil
end
