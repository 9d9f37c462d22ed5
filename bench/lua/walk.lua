-- walk.lua: GET the paths of a list in turn, for bench/static.py.
--   wrk -t T ... -s walk.lua URL -- PATHS T loop
--   wrk -t T ... -s walk.lua URL -- PATHS T once SENTINEL
-- PATHS holds one path a line.  Thread k of T starts at k/T of the list,
-- so the threads ask for different files, not the same file at once.
-- loop: each thread walks on round the list until wrk stops; requests are
--   formatted at init and no response() is defined, so wrk parses nothing
--   it does not need.
-- once: thread k requests its own share (k/T to (k+1)/T of the list) once,
--   then SENTINEL, a path that does not exist (404), on every connection
--   still asking; when it has a 200 for each file of its share it prints
--   "walk-done ..." (flushed) and stops.  The caller sends wrk SIGINT once
--   every thread said so; done() prints "walk-total ok=.. bad=.. extra=..",
--   bad counting answers other than 200 and 404.  wrk calls request()
--   once on thread 0 before the run (to check the request, then throws it
--   away): thread 0 answers that call with the sentinel, so no file of its
--   share is lost.
local threads = {}
local nthreads = 0

function setup(thread)
   thread:set("id", nthreads)
   nthreads = nthreads + 1
   table.insert(threads, thread)
end

local function once_response(status, headers, body)
   if status == 404 then
      extra = extra + 1
      return
   end
   if status == 200 then got = got + 1 else bad = bad + 1 end
   if got + bad >= want and not finished then
      finished = true
      io.stdout:write(string.format("walk-done thread=%d ok=%d bad=%d\n", id, got, bad))
      io.stdout:flush()
      if wrk.thread then wrk.thread:stop() end
   end
end

function init(args)
   local paths = {}
   local f = assert(io.open(args[1], "r"))
   for line in f:lines() do
      if line ~= "" then paths[#paths + 1] = line end
   end
   f:close()
   local n = #paths
   local t = tonumber(args[2])
   mode = args[3]
   reqs = {}
   if mode == "once" then
      -- the share of thread id: paths first .. last (1-based)
      local first = math.floor(id * n / t) + 1
      local last = math.floor((id + 1) * n / t)
      for j = first, last do reqs[#reqs + 1] = wrk.format(nil, paths[j]) end
      want = #reqs
      sentinel = wrk.format(nil, args[4])
      got, bad, extra = 0, 0, 0
      finished = want == 0
      skip = (id == 0)
      i = 0
      response = once_response
   else
      for j = 1, n do reqs[j] = wrk.format(nil, paths[j]) end
      i = math.floor(id * n / t)
   end
   count = #reqs
end

function request()
   if mode == "once" then
      if skip then
         skip = false
         return sentinel
      end
      if i < count then
         i = i + 1
         return reqs[i]
      end
      return sentinel
   end
   i = i % count + 1
   return reqs[i]
end

function done(summary, latency, requests)
   -- done() runs in wrk's main state, where init() never ran: the mode is
   -- read back from the threads
   local ok, b, x = 0, 0, 0
   for _, t in ipairs(threads) do
      if t:get("mode") ~= "once" then return end
      ok = ok + t:get("got")
      b = b + t:get("bad")
      x = x + t:get("extra")
   end
   io.stdout:write(string.format("walk-total ok=%d bad=%d extra=%d\n", ok, b, x))
end
