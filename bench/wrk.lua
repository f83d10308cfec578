-- wrk script for the closed-loop scenarios (bench/wrk.ts writes the request into WRK_SPEC, a JSON-free
-- "key=value" file wrk's Lua can read without a JSON library). Every request is POSTed with a body that
-- differs per request (a counter in the OpenAI `user` field, which every target passes through and the
-- simulator ignores), so no layer can serve a cached answer. done() prints one JSON line.
local spec = {}
for line in io.lines(os.getenv("WRK_SPEC")) do
  local k, v = line:match("^([^=]+)=(.*)$")
  if k then spec[k] = v end
end

local headers = {}
for name, value in (spec.headers or ""):gmatch("([^\t]+)\t([^\t]*)\t?") do headers[name] = value end
local prefix, suffix = spec.body_prefix, spec.body_suffix
local path = spec.path
local counter = 0

function setup(thread)
  thread:set("id", tostring(thread))
end

function request()
  counter = counter + 1
  return wrk.format("POST", path, headers, prefix .. counter .. suffix)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"wrk":true,"requests":%d,"duration_us":%d,"non2xx":%d,"errors":%d,"p50":%d,"p99":%d,"p999":%d,"mean":%.1f,"max":%d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.mean, latency.max))
end
