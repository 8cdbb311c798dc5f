-- wrk script for the benchmarks: sends one fixed request over and over and checks every answer.
--
--   BENCH_SPEC=<file> wrk -t1 -c16 -d10s --latency -s bench/wrk/request.lua <url>
--
-- <file> (written by bench/run.mjs): optionally a line `method GET` (default POST), header lines
-- `Name: value`, lines `expect <text>`, a blank line, then the body (empty for GET). An answer
-- counts as good when its status is 200 and its body contains every expected text; wrk reads
-- each answer to its end (an SSE answer too: it ends).
-- done() prints one line `BENCH_JSON {...}` with the totals and the latency percentiles (µs).

local spec = assert(os.getenv("BENCH_SPEC"), "BENCH_SPEC is not set")
local f = assert(io.open(spec, "rb"))
local content = f:read("*a")
f:close()
local head, body = content:match("^(.-)\n\n(.*)$")
assert(head, "bad spec file " .. spec)

expects = {}
wrk.method = "POST"
wrk.body = body
for line in head:gmatch("[^\n]+") do
  local e = line:match("^expect (.*)$")
  local m = line:match("^method (%u+)$")
  if m then
    wrk.method = m
    if m == "GET" then wrk.body = nil end
  elseif e then
    table.insert(expects, e)
  else
    local k, v = line:match("^([^:]+):%s*(.*)$")
    wrk.headers[k] = v
  end
end

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  good = 0
  bad = 0
  first_bad = ""
end

function response(status, headers, resp)
  local ok = status == 200
  if ok then
    for _, e in ipairs(expects) do
      if not resp:find(e, 1, true) then
        ok = false
        break
      end
    end
  end
  if ok then
    good = good + 1
  else
    bad = bad + 1
    if first_bad == "" then first_bad = status .. " " .. resp:sub(1, 300) end
  end
end

local function jsonstr(s)
  return '"' .. s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"'
end

function done(summary, latency, requests)
  local g, b, fb = 0, 0, ""
  for _, t in ipairs(threads) do
    g = g + t:get("good")
    b = b + t:get("bad")
    local tb = t:get("first_bad")
    if fb == "" and tb then fb = tb end
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"good":%d,"bad":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"mean":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d},"first_bad":%s}\n',
    summary.requests, summary.duration, summary.bytes, g, b,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), jsonstr(fb)))
end
