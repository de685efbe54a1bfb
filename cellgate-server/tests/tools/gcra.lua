-- GCRA as one Lua script per request, the pattern users put in Redis when they have no module:
-- the shape of redis-cell's CL.THROTTLE, returning its five fields.
--
--   EVALSHA sha 1 KEY MAX_BURST COUNT_PER_PERIOD PERIOD_SECONDS [QUANTITY]
--   -> {limited 0|1, limit, remaining, retry_after s (-1 when allowed), reset_after s}
--
-- Integer math in microseconds (Lua numbers are doubles, exact for integers below 2^53, which
-- microseconds since the epoch stay well under): the key holds the theoretical arrival time
-- (TAT), expiring when the backlog drains. Rounding as redis-cell's: retry_after and
-- reset_after truncated to seconds, remaining truncated toward zero and 0 once the backlog
-- passes the tolerance. The benchmark passes valid arguments; this script does not guard
-- against zero or negative ones.
local burst = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local quantity = tonumber(ARGV[4] or '1')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = math.floor(period * 1000000 / count)
local tolerance = interval * (burst + 1)
local increment = interval * quantity
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
  tat = now
end
local new_tat = tat + increment
local allow_at = new_tat - tolerance
local limited, retry, ttl = 0, -1, 0
if now < allow_at then
  limited = 1
  if increment <= tolerance then
    retry = math.floor((allow_at - now) / 1000000)
  end
  ttl = tat - now
else
  ttl = new_tat - now
  redis.call('SET', KEYS[1], new_tat, 'PX', math.max(1, math.ceil(ttl / 1000)))
end
local next_free = tolerance - ttl
local remaining = 0
if next_free > 0 then
  remaining = math.floor(next_free / interval)
end
return {limited, burst + 1, remaining, retry, math.floor(ttl / 1000000)}
