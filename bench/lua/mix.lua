-- mix.lua: GET each path of a list in turn, for bench/policy.py.
--   wrk ... -s mix.lua URL -- PATHS [COOKIE]
-- PATHS holds one path a line; COOKIE, when given, is sent as the Cookie
-- header of every request.  Each thread starts at its own offset, so the
-- connections do not ask for the same object at the same time.  Requests
-- are formatted once, at init; request() only picks the next one.
local next_id = 0

function setup(thread)
   thread:set("id", next_id)
   next_id = next_id + 1
end

function init(args)
   local headers = {}
   if args[2] and args[2] ~= "" then
      headers["Cookie"] = args[2]
   end
   reqs = {}
   local f = assert(io.open(args[1], "r"))
   for line in f:lines() do
      if line ~= "" then
         reqs[#reqs + 1] = wrk.format("GET", line, headers)
      end
   end
   f:close()
   n = #reqs
   i = (id * 7) % n
end

function request()
   i = i % n + 1
   return reqs[i]
end
