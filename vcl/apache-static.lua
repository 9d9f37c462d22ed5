-- apache-static.lua: Apache behind surogat, static files served by surogat
-- itself (surogat-lua(7) BACKENDS, DIRECTORS AND ROUTES; surogatd(8) STATIC
-- FILES and COMPRESSION).
--
--   surogatd -a :80 -f /etc/surogat/vcl/apache-static.lua
--
-- No -b: the backends are declared here.  Edit the two addresses below.
--
--   * Apache (mod_php, CGI) listens on 127.0.0.1:8080; a probe asks it for
--     /server-status every 5 s, and when it is sick requests get 503 at
--     once, or the stale copy of a page while stale-if-error allows;
--   * a second Apache (or any copy of the site) can join the director:
--     uncomment "apache2" below;
--   * files under the document root with a static extension are served by
--     surogat from the files (sendfile, an open-file cache, ETag, 304,
--     ranges), with Cache-Control/Expires per type as mod_expires'
--     ExpiresByType would; *.php, .ht*, dotfiles and backup files are never
--     served from there (the default deny list);
--   * pages: logged-in users (a session cookie) and POSTs go to Apache every
--     time; analytics cookies are dropped so that anonymous pages are cached;
--     a page that sets a cookie is never stored;
--   * pages are stored gzip-compressed once and gunzipped for the rare
--     client without gzip (http_gzip_support, on by default).

backend "apache" {
    host = "127.0.0.1", port = 8080,
    first_byte_timeout = 60,
    probe = { url = "/server-status?auto", interval = 5, timeout = 2, window = 8, threshold = 3 },
}
-- backend "apache2" { host = "10.0.0.12", port = 8080, probe = { url = "/server-status?auto" } }

-- Several Apaches share the dynamic pages; a sick one is skipped.
director "app" { type = "round_robin", backends = { "apache" --[[, "apache2" ]] } }

backend "static" {
    root = "/var/www/html",
    index = { "index.html" },
    expires = {
        "image/*=2592000",                 -- access plus 30 days
        "font/*=31536000",                 -- access plus 1 year
        "text/css=604800",                 -- access plus 7 days
        "application/javascript=604800",
        "text/javascript=604800",
    },
}

route { ext = { "jpg", "jpeg", "png", "gif", "webp", "svg", "ico", "css", "js",
                "woff", "woff2", "ttf", "mp4", "pdf", "zip" }, to = "static" }
route { to = "app" }

-- Cookies that say a user is logged in: PHP's session, WordPress, Drupal.
local SESSION = "(^|;)\\s*(PHPSESSID|wordpress_logged_in_[^=]*|S?SESS[0-9a-f]*)="
-- Analytics cookies, which the server never reads.
local TRACKING = "^\\s*(_ga(_[A-Za-z0-9]+)?|_gid|__utm[a-z]*)="

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
    -- Static files never get here: their route answers from the files.
    if req.method ~= "GET" and req.method ~= "HEAD" then
        return nil -- POST and the like pass, PURGE purges (builtin.lua)
    end
    if req.http.authorization then
        return "pass"
    end
    local cookie = req.http.cookie
    if cookie and re.match(cookie, SESSION) then
        return "pass"
    end
    if cookie then
        req.http.cookie = strip_tracking(cookie)
    end
    -- Cookies left: builtin.lua passes; none: looked up.
end

function backend_response(bereq, beresp)
    if beresp.http.set_cookie then
        -- A page that sets a cookie is someone's: never store it.
        return "pass"
    end
    -- Other pages: RFC 9111 (Cache-Control, Expires), as builtin.lua does.
end

function deliver(req, resp)
    resp.http["X-Powered-By"] = nil
end
