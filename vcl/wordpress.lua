-- wordpress.lua: surogat in front of a WordPress site (surogat-lua(7)), the
-- rules of the usual WordPress VCLs.
--
--   surogatd -b 127.0.0.1:8080 -f vcl/wordpress.lua
--
-- What it does:
--   * never cached: the dashboard (/wp-admin/), the login and sign-up pages,
--     wp-cron.php, xmlrpc.php, previews (?preview=true, ?preview_id=),
--     WooCommerce's cart, checkout, account pages and ?add-to-cart=;
--     those requests keep their cookies, which WordPress needs;
--   * logged-in users, visitors who typed a post password or left a comment,
--     and shoppers with a cart (cookies wordpress_logged_in_*, wp-postpass_*,
--     comment_author_*, woocommerce_items_in_cart, wp_woocommerce_session_*)
--     pass: they never get a cached page and their pages are never stored;
--   * every other cookie (analytics _ga, _gid, _fbp ..., wordpress_test_cookie)
--     is removed, so that anonymous pages are cached whatever the browser
--     carries; tracking parameters (utm_*, fbclid, gclid ...) are removed from
--     the URL and the rest sorted, one object per page;
--   * static files under /wp-content/ and /wp-includes/, by extension, lose
--     Cookie and Set-Cookie and are kept 30 days;
--   * a page WordPress sends without Cache-Control is kept PAGE_TTL, feeds
--     FEED_TTL; an explicit Cache-Control (no-cache for logged-in users,
--     a caching plugin's max-age) is obeyed;
--   * a page that sets a cookie other than an analytics one is not stored;
--   * PURGE from the PURGERS list, as cache plugins (Varnish HTTP Purge,
--     W3 Total Cache, WP Rocket ...) send it: the URL, or with
--     "X-Purge-Method: regex" every URL of the Host matching it (a ban);
--     403 from anywhere else.  The "purge" action also checks purge_acl;
--   * X-Policy on the response says which rule applied.

-- Who may PURGE: the WordPress host itself, usually.
local PURGERS = surogat.acl{ "127.0.0.1", "::1" }

local PAGE_TTL = surogat.duration("10m")
local PAGE_GRACE = surogat.duration("1h")
local FEED_TTL = surogat.duration("2m")
local STATIC_TTL = surogat.duration("30d")

-- Paths WordPress (and WooCommerce) answer per user or per call.
local NEVER = "^/(wp-admin(/|$)|wp-login\\.php|wp-signup\\.php|wp-activate\\.php|" ..
    "wp-cron\\.php|xmlrpc\\.php|wp-comments-post\\.php|" ..
    "(cart|checkout|my-account)(/|$))"

-- Files that are the same for everyone, in the directories WordPress
-- serves them from.
local STATIC = "(?i)^/(wp-content|wp-includes)/.*\\." ..
    "(jpe?g|png|gif|webp|avif|svg|ico|css|js|woff2?|ttf|eot|otf|mp3|mp4|webm|pdf|zip|txt|xml)$"

-- Cookies that make a page someone's own.
local PRIVATE = "^(wordpress_logged_in_|wp-postpass_|comment_author_|woocommerce_items_in_cart|" ..
    "wp_woocommerce_session_|wordpress_sec_)"

-- Cookies the server never reads (Set-Cookie of those does not make a page private).
local TRACKING = "^(_ga(_[A-Za-z0-9]+)?|_gid|_gat[A-Za-z0-9_]*|_gcl_[a-z]+|_fbp|_fbc|" ..
    "__utm[a-z]*|_hj[A-Za-z0-9_]*)$"

local function is_static(url)
    return re.match(surogat.url_path(url), STATIC)
end

-- URL parameters that only say where a visitor came from.
local TRACKING_PARAMS = { "utm_*", "fbclid", "gclid", "gclsrc", "dclid", "msclkid",
    "mc_cid", "mc_eid", "_ga" }

local FEED = "^/(.*/)?feed(/|$)"

local function is_feed(url)
    return re.match(surogat.url_path(url), FEED) or surogat.query_get(url, "feed") ~= nil
end

-- A ban argument in double quotes, as vcl/purge.lua does.
local function quoted(s)
    return '"' .. s:gsub('[\\"]', '\\%0') .. '"'
end

-- The name of each cookie of a Cookie header.
local function cookie_names(cookie)
    local names = {}
    for c in cookie:gmatch("[^;]+") do
        names[#names + 1] = c:match("^%s*([^=]*)")
    end
    return names
end

local function has_private_cookie(cookie)
    for _, name in ipairs(cookie_names(cookie)) do
        if re.match(name, PRIVATE) then
            return true
        end
    end
    return false
end

local function never_cached(url)
    local path = surogat.url_path(url)
    return re.match(path, NEVER)
        or surogat.query_get(url, "preview") == "true"
        or surogat.query_get(url, "preview_id") ~= nil
        or surogat.query_get(url, "add-to-cart") ~= nil
end

local function purge(req)
    if not PURGERS:match(client.ip) then
        return surogat.synth(403, "PURGE is not allowed from " .. client.ip)
    end
    if (req.http["X-Purge-Method"] or ""):lower() ~= "regex" then
        return "purge"
    end
    -- Varnish HTTP Purge sends "PURGE /.*" or "PURGE /category/.*".
    local expr = "req.url ~ " .. quoted("^" .. req.url)
    if req.http.host then
        expr = "req.http.host == " .. quoted(req.http.host) .. " && " .. expr
    end
    local ok, err = pcall(surogat.ban, expr)
    if not ok then
        return surogat.synth(400, tostring(err))
    end
    return surogat.synth(200, "Banned: " .. expr)
end

function recv(req)
    if req.method == "PURGE" then
        req.ctx.why = "purge"
        return purge(req)
    end
    if req.method ~= "GET" and req.method ~= "HEAD" then
        -- Comments, logins, admin-ajax: builtin.lua passes them.
        req.ctx.why = "method"
        return nil
    end
    if req.http.authorization then
        req.ctx.why = "authorization"
        return "pass"
    end
    if never_cached(req.url) then
        req.ctx.why = "never"
        return "pass"
    end
    req.url = surogat.query_sort(surogat.query_remove(req.url, table.unpack(TRACKING_PARAMS)))
    if is_static(req.url) then
        req.http.cookie = nil
        req.ctx.why = "static"
        return "hash"
    end
    local cookie = req.http.cookie
    if cookie and has_private_cookie(cookie) then
        req.ctx.why = "private"
        return "pass"
    end
    -- What is left (analytics, wordpress_test_cookie ...) does not change the page.
    req.http.cookie = nil
    req.ctx.why = "page"
    return "hash"
end

-- Set-Cookie fields of beresp other than analytics ones: how many.
local function strip_tracking_set_cookies(beresp)
    local keep, other = {}, 0
    beresp.http:each(function(name, value)
        if name:lower() == "set-cookie" then
            local cname = value:match("^%s*([^=;]*)")
            if not re.match(cname, TRACKING) then
                keep[#keep + 1] = value
                other = other + 1
            end
        end
    end)
    beresp.http["Set-Cookie"] = nil
    for _, v in ipairs(keep) do
        beresp.http:append("Set-Cookie", v)
    end
    return other
end

function backend_response(bereq, beresp)
    if is_static(bereq.url) then
        -- A cookie set along with a file would go to every client of the copy.
        beresp.http["Set-Cookie"] = nil
        if beresp.status == 200 then
            beresp.ttl = STATIC_TTL
        end
        return "deliver"
    end
    if bereq.http.cookie or bereq.http.authorization or never_cached(bereq.url)
            or (bereq.method ~= "GET" and bereq.method ~= "HEAD") then
        -- A pass (recv kept the cookies of those only): not stored, left as it is.
        return nil
    end
    if strip_tracking_set_cookies(beresp) > 0 then
        -- Someone's session or cart: never store it.
        return "pass"
    end
    if beresp.status == 200 and not beresp.http.cache_control and not beresp.http.expires then
        if is_feed(bereq.url) then
            beresp.ttl = FEED_TTL
        else
            beresp.ttl = PAGE_TTL
            beresp.grace = PAGE_GRACE
        end
    end
    -- Otherwise Cache-Control and Expires decide (RFC 9111), as builtin.lua does.
end

function deliver(req, resp)
    resp.http["X-Policy"] = req.ctx.why
    resp.http["X-Powered-By"] = nil
end
