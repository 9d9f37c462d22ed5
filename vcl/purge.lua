-- purge.lua: PURGE and BAN from a list of trusted addresses (surogat-lua(7)).
--
--   surogatd -b 127.0.0.1:8080 -f vcl/purge.lua
--
--   curl -X PURGE http://127.0.0.1:8080/page       every variant of Host + /page
--   curl -X BAN http://127.0.0.1:8080/news/        every object of that Host whose
--                                                  URL matches the regex /news/
--   curl -X BAN -H 'X-Ban-Url: ^/img/.*\.png$' http://127.0.0.1:8080/
--
-- Anyone else gets 403.  The "purge" action also checks the purge_acl
-- parameter (127.0.0.1 and ::1 by default): widen it as well when this
-- list names other hosts.

local purgers = surogat.acl{ "127.0.0.1", "::1" }

-- A ban argument in double quotes: \ and " escaped, so that a regex's
-- backslashes reach PCRE2 unchanged and blanks are allowed.
local function quoted(s)
    return '"' .. s:gsub('[\\"]', '\\%0') .. '"'
end

function recv(req)
    if req.method ~= "PURGE" and req.method ~= "BAN" then
        return nil -- builtin.lua
    end
    if not purgers:match(client.ip) then
        return surogat.synth(403, req.method .. " is not allowed from " .. client.ip)
    end
    if req.method == "PURGE" then
        return "purge"
    end
    -- BAN: the regex from X-Ban-Url, else the request-target itself (as a
    -- regex, unanchored), limited to the request's Host if it has one.
    local expr = "req.url ~ " .. quoted(req.http["X-Ban-Url"] or req.url)
    if req.http.host then
        expr = "req.http.host == " .. quoted(req.http.host) .. " && " .. expr
    end
    local ok, err = pcall(surogat.ban, expr)
    if not ok then
        return surogat.synth(400, tostring(err))
    end
    return surogat.synth(200, "Banned: " .. expr)
end
