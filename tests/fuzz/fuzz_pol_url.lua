-- The policy script of fuzz_pol_url.c: its recv hook runs the URL,
-- duration and date helpers of the `surogat` table on the fuzzed strings
-- and checks each against a plain-Lua model of surogat-lua(7)'s words, and
-- a few laws (sorting is a permutation, removing then sorting is sorting
-- then removing, a date printed back parses to itself).
--
-- req.url is the fuzzed URL; X-Fuzz-1 ... X-Fuzz-N are the other fuzzed
-- strings (parameter names, durations, dates).  recv returns "hash" when
-- every check held, surogat.synth(599, what failed) when one did not; a Lua
-- error in a helper is an error of the hook, which the target also reports.

local MAXF = 8

-- Byte order, as memcmp: Lua's < on strings goes through strcoll.
local function bytes_lt(a, b)
    local n = math.min(#a, #b)
    for i = 1, n do
        local x, y = a:byte(i), b:byte(i)
        if x ~= y then
            return x < y
        end
    end
    return #a < #b
end

-- path, query (nil without '?'), fragment ("" without '#')
local function split(url)
    local h = url:find("#", 1, true)
    local body = h and url:sub(1, h - 1) or url
    local frag = h and url:sub(h) or ""
    local q = body:find("?", 1, true)
    if not q then
        return body, nil, frag
    end
    return body:sub(1, q - 1), body:sub(q + 1), frag
end

-- The non-empty parameters: { piece, name, position }
local function params(query)
    local out = {}
    if query then
        for piece in query:gmatch("[^&]+") do
            out[#out + 1] = { piece, piece:match("^[^=]*"), #out + 1 }
        end
    end
    return out
end

local function rebuild(path, ps, frag)
    local pieces = {}
    for _, p in ipairs(ps) do
        pieces[#pieces + 1] = p[1]
    end
    if #pieces == 0 then
        return path .. frag
    end
    return path .. "?" .. table.concat(pieces, "&") .. frag
end

local function model_get(url, name)
    local _, query = split(url)
    for _, p in ipairs(params(query)) do
        if p[2] == name then
            return p[1]:sub(#name + 2)
        end
    end
    return nil
end

local function matches(name, pat)
    if pat:sub(-1) == "*" then
        return name:sub(1, #pat - 1) == pat:sub(1, -2)
    end
    return name == pat
end

local function model_remove(url, pats)
    local path, query, frag = split(url)
    if not query then
        return url
    end
    local keep = {}
    for _, p in ipairs(params(query)) do
        local gone = false
        for _, pat in ipairs(pats) do
            if matches(p[2], pat) then
                gone = true
                break
            end
        end
        if not gone then
            keep[#keep + 1] = p
        end
    end
    return rebuild(path, keep, frag)
end

local function model_sort(url)
    local path, query, frag = split(url)
    if not query then
        return url
    end
    local ps = params(query)
    table.sort(ps, function(a, b)
        if a[2] ~= b[2] then
            return bytes_lt(a[2], b[2])
        end
        return a[3] < b[3]
    end)
    return rebuild(path, ps, frag)
end

-- The parameters as a multiset: piece -> count.
local function bag(url)
    local _, query = split(url)
    local t = {}
    for _, p in ipairs(params(query)) do
        t[p[1]] = (t[p[1]] or 0) + 1
    end
    return t
end

local function same_bag(a, b)
    for k, v in pairs(a) do
        if b[k] ~= v then
            return false
        end
    end
    for k, v in pairs(b) do
        if a[k] ~= v then
            return false
        end
    end
    return true
end

local failure

local function check(ok, what, ...)
    if not ok and not failure then
        local args = { ... }
        for i = 1, select("#", ...) do
            args[i] = string.format("%q", tostring(args[i]))
        end
        failure = what .. ": " .. table.concat(args, " ")
    end
end

local function check_url(url, names)
    local path, query, frag = split(url)
    check(surogat.url_path(url) == path, "url_path", url, surogat.url_path(url))
    check(surogat.url_query(url) == query, "url_query", url, surogat.url_query(url))
    for _, n in ipairs(names) do
        local got, want = surogat.query_get(url, n), model_get(url, n)
        check(got == want, "query_get", url, n, got, want)
    end

    local sorted = surogat.query_sort(url)
    check(sorted == model_sort(url), "query_sort", url, sorted, model_sort(url))
    check(same_bag(bag(url), bag(sorted)), "query_sort is not a permutation", url, sorted)
    check(surogat.query_sort(sorted) == sorted, "query_sort twice", url, sorted)
    local p2, _, f2 = split(sorted)
    check(p2 == path and f2 == frag, "query_sort moved the path or fragment", url, sorted)

    local removed = surogat.query_remove(url, table.unpack(names))
    check(removed == model_remove(url, names), "query_remove", url, removed,
        model_remove(url, names))
    local _, rq = split(removed)
    for _, p in ipairs(params(rq)) do
        for _, n in ipairs(names) do
            check(not matches(p[2], n), "query_remove kept", url, n, removed)
        end
    end
    check(surogat.query_sort(removed) == surogat.query_remove(sorted, table.unpack(names)),
        "query_remove and query_sort do not commute", url)
    check(surogat.query_remove(url) == model_remove(url, {}), "query_remove()", url)
    if query == nil then
        check(sorted == url and removed == url, "a URL without a query changed", url)
    end
end

local function check_duration(s)
    local d, msg = surogat.duration(s)
    if d == nil then
        check(type(msg) == "string" and msg:find("surogat.duration", 1, true),
            "duration message", s, msg)
        return
    end
    check(type(d) == "number" and d >= 0 and d < math.huge, "duration range", s, d)
    check(surogat.duration(s) == d, "duration twice", s)
    check(surogat.duration(d) == d, "duration of a number", s, d)
    if s:match("^%d+$") and #s < 10 then
        check(d == tonumber(s), "bare number", s, d)
    end
    check(not s:find("[^0-9.a-z]"), "duration took a stray byte", s, d)
end

local function check_date(s)
    local t, msg = surogat.parse_time(s)
    if t == nil then
        check(type(msg) == "string", "parse_time message", s, msg)
        return
    end
    check(math.type(t) == "integer", "parse_time not whole seconds", s, t)
    if t >= 0 and t < 253402300800 then
        local again = os.date("!%a, %d %b %Y %H:%M:%S GMT", t)
        check(surogat.parse_time(again) == t, "date printed back", s, t, again)
    end
end

function recv(req)
    failure = nil
    local url = req.url
    local names = {}
    for i = 1, MAXF do
        names[#names + 1] = req.http["X-Fuzz-" .. i]
    end
    check_url(url, names)
    for i = 1, #names do
        check_url(names[i], { url, table.unpack(names, 1, i - 1) })
    end
    for _, s in ipairs({ url, table.unpack(names) }) do
        check_duration(s)
        check_date(s)
    end
    if failure then
        return surogat.synth(599, failure)
    end
    return "hash"
end
