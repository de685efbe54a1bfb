-- cellgate fleet lease script: one limit's whole server side, run atomically by Redis.
--
-- KEYS[1] state hash    {name}: mode, c1, c2, rem (stock) or tat (rate), lost, stranded,
--                       epoch, slot,
--                       r:<pid> -> "seq value live fb info leasable wait" (the answer to the
--                       process's newest sequence; in the state hash so that one read and one
--                       write of it serve the whole call)
-- KEYS[2] holders hash  s:<pid> last seen (us), f:<pid> fallback burst, n:<pid> net units held
-- ARGV: op (grant | give | charge | strand), pid, seq, n, mode (stock | rate), c1, c2, holder ttl (us),
--       known epoch (0: none yet), fresh epoch (this process's, used if it creates the limit),
--       short lease (rate: the units a request should carry when the fleet is short: the
--       client's minimum lease or its short spacing of the rate, whichever is more)
--   stock: c1 = initial units, c2 = 0;   rate: c1 = emission interval (us), c2 = burst
--
-- The epoch is a random id written once when the limit is created. A process that has seen
-- the limit sends its epoch; finding no limit, or one with another epoch, means Redis forgot
-- it (a restart without persistence, a failover to a replica that lagged) and somebody, maybe
-- this call, would start it afresh. Never fresh: a stock is marked forgotten (every call then
-- fails: it sells only what processes still hold leased, until an operator resets it); a
-- rate's bucket is set empty (as if its whole burst had just been used).
--
-- Every number is an integer below 2^53 (times in microseconds), so Lua's doubles hold them
-- exactly; they are written back with %d, never with Lua's float formatting.
-- Reply: { value, live holders, flag (0 new, 1 repeated sequence, 2 stale sequence),
--          fallback burst of this holder, info (stock: units left; rate: units grantable now),
--          leasable burst (rate: the burst less the fallback reservations; stock: 0),
--          the limit's epoch, 1 if this call found the limit forgotten (rate: set empty),
--          wait (us; rate, a short grant: when to ask again, the holder's slot) }

local S, H = KEYS[1], KEYS[2]
local op, pid = ARGV[1], ARGV[2]
local seq, n = tonumber(ARGV[3]), tonumber(ARGV[4])
local mode = ARGV[5]
local c1, c2 = tonumber(ARGV[6]), tonumber(ARGV[7])
local ttl = tonumber(ARGV[8])
local known, fresh = tonumber(ARGV[9]) or 0, tonumber(ARGV[10]) or 1
local minl = tonumber(ARGV[11]) or 1

local function int(x) return string.format('%d', x) end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local FORGOTTEN = 'CELLGATE_FORGOTTEN redis lost this limit (restarted without persistence, or a failover to a replica that lagged): it is not sold afresh; reset it (see the README)'

-- Few commands per call (each counts in Redis's work): TIME, one read of the limit's state
-- with this holder's last reply, one read of the holders, one write of the state with the
-- reply, and a write of the holders only when a holder's fields change.
local st = redis.call('HMGET', S, 'mode', 'c1', 'c2', 'epoch', 'forgotten', 'rem', 'tat', 'slot', 'lost',
  'r:' .. pid, 'stranded')
local m = st[1]
local found_epoch = tonumber(st[4] or '0') or 0
local recreated = (not m) and known ~= 0
local rem, tat = tonumber(st[6] or '0') or 0, tonumber(st[7] or '0') or 0
local slot, lost = tonumber(st[8] or '0') or 0, tonumber(st[9] or '0') or 0
local lost0 = lost

-- The first holder fixes the configuration; a different one is refused, not merged.
if not m then
  if known ~= 0 and mode == 'stock' then
    redis.call('HSET', S, 'mode', mode, 'c1', int(c1), 'c2', int(c2), 'forgotten', '1')
    return redis.error_reply(FORGOTTEN)
  end
  found_epoch = fresh
  if mode == 'stock' then rem = c1 else tat = 0 end
  redis.call('HSET', S, 'mode', mode, 'c1', int(c1), 'c2', int(c2), 'lost', '0',
    'epoch', int(fresh), 'rem', int(rem), 'tat', int(tat))
elseif m ~= mode or tonumber(st[2]) ~= c1 or tonumber(st[3]) ~= c2 then
  return redis.error_reply('CELLGATE limit exists with another configuration')
end
if st[5] then return redis.error_reply(FORGOTTEN) end
if found_epoch == 0 then
  -- A limit created before epochs existed: it gets one now.
  found_epoch = fresh
  redis.call('HSET', S, 'epoch', int(fresh))
end
local forgotten = 0
if recreated or (known ~= 0 and known ~= found_epoch) then
  -- Created afresh since this process last saw it (by this call, or by a process that never
  -- knew it), so Redis forgot what was taken.
  if mode == 'stock' then
    redis.call('HSET', S, 'forgotten', '1')
    return redis.error_reply(FORGOTTEN)
  end
  local empty = now + c2 * c1
  if tat < empty then
    tat = empty
    redis.call('HSET', S, 'tat', int(tat))
  end
  forgotten = 1
end

-- Idempotency: a retried or duplicated command gets the answer of its first execution, and an
-- older sequence than the newest executed one changes nothing.
local last = st[10]
if last then
  local ls, lv, ll, lf, li, lb, lw = string.match(last, '^(%d+) (%d+) (%d+) (%d+) (%-?%d+) (%d+) ?(%d*)$')
  ls = tonumber(ls)
  lw = tonumber(lw) or 0
  if seq == ls then return { tonumber(lv), tonumber(ll), 1, tonumber(lf), tonumber(li), tonumber(lb), found_epoch, forgotten, lw } end
  if seq < ls then return { 0, tonumber(ll), 2, tonumber(lf), tonumber(li), tonumber(lb), found_epoch, forgotten, 0 } end
end

-- Live holders. A holder silent for longer than the ttl is reconciled: its fallback burst is
-- freed and whatever it still held (stock) is counted lost, never put back on sale: it may
-- have sold those units before it died.
local seen, fbs, held = {}, {}, {}
local all = redis.call('HGETALL', H)
for i = 1, #all, 2 do
  local kind, p = string.sub(all[i], 1, 2), string.sub(all[i], 3)
  if kind == 's:' then seen[p] = tonumber(all[i + 1]) end
  if kind == 'f:' then fbs[p] = tonumber(all[i + 1]) end
  if kind == 'n:' then held[p] = tonumber(all[i + 1]) end
end
local live, reserved = 0, 0
for p, s in pairs(seen) do
  if s + ttl < now and p ~= pid then
    if mode == 'stock' and (held[p] or 0) > 0 then lost = lost + held[p] end
    redis.call('HDEL', H, 's:' .. p, 'f:' .. p, 'n:' .. p)
  else
    live = live + 1
    reserved = reserved + (fbs[p] or 0)
  end
end

-- Registration: a rate holder's fallback burst is fixed once and reserved out of the global
-- burst (B/16 each while half the burst is unreserved), so an outage cannot overshoot it.
-- Last seen: written when it is a tenth of the ttl old (or the holder is new), not on every
-- call; so the server may see a holder up to ttl/10 later than its last command, which the
-- client's fallback deadline (4/5 of the ttl after its last answered command) leaves room for.
local hset = {}
if not seen[pid] or seen[pid] + ttl / 10 <= now then hset = { 's:' .. pid, int(now) } end
local fb = fbs[pid]
if not seen[pid] or seen[pid] + ttl < now then
  if not seen[pid] then live = live + 1 end
  if not fb then
    fb = 0
    if mode == 'rate' then
      fb = math.min(math.floor(c2 / 16), math.floor(c2 / 2) - reserved)
      if fb < 0 then fb = 0 end
    end
    reserved = reserved + fb
    hset[#hset + 1] = 'f:' .. pid
    hset[#hset + 1] = int(fb)
  end
end

local v, info, leasable, wait = 0, 0, 0, 0
local sset = {}
if mode == 'stock' then
  if op == 'grant' then
    -- Near the end of a stock every holder gets at most remaining/(2 live) so the last units
    -- spread over the fleet instead of sitting unsold in one lease.
    local cap = math.max(1, math.floor(rem / (2 * live)))
    v = math.min(n, rem, cap)
    rem = rem - v
    hset[#hset + 1] = 'n:' .. pid
    hset[#hset + 1] = int((held[pid] or 0) + v)
  elseif op == 'give' then
    v = n
    rem = rem + n
    hset[#hset + 1] = 'n:' .. pid
    hset[#hset + 1] = int((held[pid] or 0) - n)
  elseif op == 'strand' then
    -- Units this holder took and will never sell (no replica acknowledged their grant): moved
    -- from what it holds to the limit's `stranded` count, never back on sale, so an operator
    -- sees the undersell and can reconcile it.
    v = math.max(0, math.min(n, held[pid] or 0))
    hset[#hset + 1] = 'n:' .. pid
    hset[#hset + 1] = int((held[pid] or 0) - v)
    sset = { 'stranded', int((tonumber(st[11] or '0') or 0) + v) }
  end
  sset[#sset + 1] = 'rem'
  sset[#sset + 1] = int(rem)
  info = rem
else
  -- GCRA over the fleet: tat in microseconds, leases debit n emission intervals up front.
  local T, B = c1, c2
  leasable = B - reserved
  tat = math.max(tat, now)
  if op == 'grant' then
    local room = now + (B - reserved) * T - tat
    local avail = 0
    if room > 0 then avail = math.floor(room / T) end
    v = math.min(n, avail)
    tat = tat + v * T
    info = avail - v
    if v < n then
      -- The fleet is short: the holder comes back at the next free slot. Slots are one short
      -- lease of accrual apart (at most a quarter of the leasable burst's fill time, so the
      -- bucket does not overflow while a holder is late): however many processes want
      -- however much, the fleet sends one short request per slot, each carrying about a
      -- short lease.
      local gap = math.max(1, math.min(minl * T, math.floor((B - reserved) * T / 4)))
      -- At most one slot per live holder ahead: holders that come back early (their wait is
      -- capped) cannot push the queue without bound.
      slot = math.min(math.max(slot, now), now + (live - 1) * gap) + gap
      sset = { 'slot', int(slot) }
      wait = slot - now
    end
  elseif op == 'give' then
    v = n
    tat = tat - n * T
  elseif op == 'charge' then
    -- Admissions made during an outage: debited whatever the room, so the fleet pays them
    -- back before anything more is granted.
    v = n
    tat = tat + n * T
  end
  sset[#sset + 1] = 'tat'
  sset[#sset + 1] = int(tat)
end
if lost ~= lost0 then
  sset[#sset + 1] = 'lost'
  sset[#sset + 1] = int(lost)
end
if #hset > 0 then redis.call('HSET', H, unpack(hset)) end
sset[#sset + 1] = 'r:' .. pid
sset[#sset + 1] = int(seq) .. ' ' .. int(v) .. ' ' .. int(live) .. ' ' .. int(fb)
  .. ' ' .. int(info) .. ' ' .. int(leasable) .. ' ' .. int(wait)
redis.call('HSET', S, unpack(sset))
return { v, live, 0, fb, info, leasable, found_epoch, forgotten, wait }
