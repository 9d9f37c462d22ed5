-- fill.lua: request PREFIX0 .. PREFIX(N-1) once each, spread over wrk's
-- threads (thread k takes k, k+T, k+2T, ...), for bench/cachehit.py.
--   wrk -t T -c C -d CAP -s fill.lua URL -- PREFIX N T
-- When a thread has all its responses it prints "fill-done ..." (flushed)
-- and stops; the caller sends wrk SIGINT once every thread said so, and
-- done() prints "fill-total ok=.. bad=..".  Requests a connection sends
-- after its thread's range is used up go to /fill-sentinel (the origin
-- answers 204) and are not counted.
-- wrk calls request() once on thread 0 before the run starts (to check the
-- request, which it then throws away): thread 0 answers that call with the
-- sentinel, so its first index is not lost.
local threads = {}
local next_id = 0

function setup(thread)
   thread:set("id", next_id)
   next_id = next_id + 1
   table.insert(threads, thread)
end

function init(args)
   prefix = args[1]
   n = tonumber(args[2])
   nthreads = tonumber(args[3])
   i = id
   want = 0
   if id < n then want = math.floor((n - 1 - id) / nthreads) + 1 end
   got, bad, extra = 0, 0, 0
   finished = false
   sentinel = wrk.format(nil, "/fill-sentinel")
   skip = (id == 0)
end

function request()
   if skip then
      skip = false
      return sentinel
   end
   if i < n then
      local p = prefix .. i
      i = i + nthreads
      return wrk.format(nil, p)
   end
   return sentinel
end

function response(status, headers, body)
   if status == 204 then
      extra = extra + 1
      return
   end
   got = got + 1
   if status ~= 200 then bad = bad + 1 end
   if got >= want and not finished then
      finished = true
      io.stdout:write(string.format("fill-done thread=%d ok=%d bad=%d\n", id, got - bad, bad))
      io.stdout:flush()
      if wrk.thread then wrk.thread:stop() end
   end
end

function done(summary, latency, requests)
   local ok, b, x = 0, 0, 0
   for _, t in ipairs(threads) do
      ok = ok + t:get("got") - t:get("bad")
      b = b + t:get("bad")
      x = x + t:get("extra")
   end
   io.stdout:write(string.format("fill-total ok=%d bad=%d extra=%d\n", ok, b, x))
end
