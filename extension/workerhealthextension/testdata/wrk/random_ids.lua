-- wrk script: GET /health/workers/{id} for ids drawn at random from a file
-- (one URL-escaped id per line), and count any status other than 200/503.
-- Usage: wrk -t1 -c8 -d30s --latency -s random_ids.lua http://HOST:PORT -- ids.txt
local ids = {}
local unexpected = 0

function init(args)
  for line in io.lines(args[1]) do
    ids[#ids + 1] = "/health/workers/" .. line
  end
  math.randomseed(os.time())
end

function request()
  return wrk.format("GET", ids[math.random(#ids)])
end

function response(status, headers, body)
  if status ~= 200 and status ~= 503 then
    unexpected = unexpected + 1
  end
end

local threads = {}
function setup(thread)
  threads[#threads + 1] = thread
end

function done(summary, latency, requests)
  local bad = 0
  for _, t in ipairs(threads) do
    bad = bad + (t:get("unexpected") or 0)
  end
  io.write(string.format("ww_requests %d\nww_rps %.1f\nww_p50_ms %.3f\nww_p99_ms %.3f\nww_max_ms %.3f\nww_unexpected %d\nww_socket_errors %d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000, bad,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
