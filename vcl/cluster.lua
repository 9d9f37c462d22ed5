-- cluster.lua: the hooks of a self-routing fleet (surogatd(8), "Scaling out";
-- surogat.cluster in surogat-lua(7)).  A module: the policy of every node
-- declares the cluster, requires this, and uses its hooks.
--
--   -- /etc/surogat/site.lua, the same file on every node
--   backend "origin" { host = "10.0.0.5", port = 8080 }
--   cluster "fleet" {
--       peers = { node1 = "10.0.0.1:6081", node2 = "10.0.0.2:6081",
--                 node3 = "10.0.0.3:6081" },
--       origin = "origin", local_ttl = "5s",
--       secret_file = "/etc/surogat/cluster.key",
--   }
--   local cluster = require "cluster"
--   recv, backend_fetch = cluster.recv, cluster.backend_fetch
--   backend_response, backend_error = cluster.backend_response, cluster.backend_error
--   synth = cluster.synth
--
--   surogatd -p identity=node1 -p policy_modules=cluster \
--            -p policy_module_path=/etc/surogat/vcl -f /etc/surogat/site.lua ...
--
-- A script with hooks of its own calls these first and returns what they
-- return when it is not nil:
--
--   function recv(req)
--       local act = cluster.recv(req)
--       if act then return act end
--       ... the site's rules ...
--   end
--
-- What each hook does:
--   recv              the members' probe, cluster messages (PURGE from a
--                     member), a hop header not believed removed; BAN from
--                     `cluster.purgers` bans here and on every member
--   backend_fetch     a miss goes to the member owning its key, which
--                     answers from its cache or fetches once (a copy is
--                     kept here only of a hot key, local_hot); the owner
--                     itself, a request that crossed a member already, a
--                     pass, or a fleet with no usable member go to the origin
--   backend_response  a copy from another member is kept local_ttl at most;
--                     an answer that an invalidation applied meanwhile may
--                     concern is not kept at all, nor given to other requests
--   backend_error     a member that failed is skipped and the fetch tried
--                     again, on the next member of the ring or the origin
--   synth             the page of a BAN, a line per member
--
-- PURGE (with Purge-Mode: soft, or Surrogate-Key) from purge_acl works on
-- any node as on one: surogatd sends it on to every member and lists
-- their counts in the answer (202 while one of them has it queued only).

local M = {}

-- Who may BAN (the cluster's purge_acl; PURGE is checked by purge_acl itself).
M.purgers = surogat.acl{ "127.0.0.1", "::1" }

-- A ban argument in double quotes: \ and " escaped.
local function quoted(s)
    return '"' .. s:gsub('[\\"]', '\\%0') .. '"'
end

-- BAN: X-Ban (a whole ban expression), else the regex of X-Ban-Url (else
-- the request-target) on the request's Host, as vcl/purge.lua spells it.
local function ban(req)
    if not M.purgers:match(client.ip) then
        return surogat.synth(403, "BAN is not allowed from " .. client.ip)
    end
    local expr = req.http["X-Ban"]
    if not expr then
        expr = "req.url ~ " .. quoted(req.http["X-Ban-Url"] or req.url)
        if req.http.host then
            expr = "req.http.host == " .. quoted(req.http.host) .. " && " .. expr
        end
    end
    local ok, report = surogat.cluster.ban(expr)
    if ok == nil then
        return surogat.synth(400, report)
    end
    req.ctx.cluster_report = "Banned: " .. expr .. "\n" .. report
    return surogat.synth(ok and 200 or 202, ok and "Banned" or "Banned, queued for some members")
end

function M.recv(req)
    local act = surogat.cluster.recv(req)
    if act then
        return act
    end
    if req.method == "BAN" then
        return ban(req)
    end
end

-- Last in backend_fetch: it signs the request as it is then.
function M.backend_fetch(bereq)
    surogat.cluster.route(bereq)
end

function M.backend_response(bereq, beresp)
    if beresp.uncacheable then
        return -- setting ttl would make it storable
    end
    -- An invalidation concerning it that came while this was on its way
    -- (the member or the origin may have read it before) leaves it to
    -- this request alone: invalidated() sees to that.
    if not surogat.cluster.invalidated(beresp) and surogat.cluster.is_peer(bereq.backend)
            and beresp.ttl > surogat.cluster.local_ttl() then
        beresp.ttl = surogat.cluster.local_ttl()
    end
end

function M.backend_error(bereq, beresp)
    if surogat.cluster.is_peer(bereq.backend) then
        surogat.cluster.failed(bereq.backend)
        return "retry"
    end
end

-- The page of a BAN: the line of each member.
function M.synth(req, resp)
    if req.ctx.cluster_report then
        resp.http["Content-Type"] = "text/plain; charset=utf-8"
        resp.body = req.ctx.cluster_report
    end
end

return M
