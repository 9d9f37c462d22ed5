-- zipf.lua: GET PREFIX<rank> with Zipf-like popularity, for bench/cachehit.py.
--   wrk ... -s zipf.lua URL -- TABLE PREFIX K
-- TABLE holds one rank (0 .. K-1) a line: the rank at quantile (j+0.5)/M of
-- the Zipf distribution, j = 0 .. M-1, so a uniform pick from it is a Zipf
-- draw.  Requests are formatted once, at init; request() only picks one.
local next_id = 0

function setup(thread)
   thread:set("id", next_id)
   next_id = next_id + 1
end

function init(args)
   local k = tonumber(args[3])
   reqs = {}
   for r = 0, k - 1 do
      reqs[r] = wrk.format(nil, args[2] .. r)
   end
   tbl = {}
   local f = assert(io.open(args[1], "r"))
   local m = 0
   for line in f:lines() do
      m = m + 1
      tbl[m] = tonumber(line)
   end
   f:close()
   size = m
   math.randomseed(12345 + 7919 * id)
end

function request()
   return reqs[tbl[math.random(size)]]
end
