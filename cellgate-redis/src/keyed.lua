-- cellgate keyed fleet script: one round trip carries many keys' operations on a per-key
-- GCRA (rate R = 1 / T per key, burst B), or with T = 0 on a per-key stock of B units, run
-- atomically by Redis.
--
-- KEYS[1] config hash   {name}: T, B
-- KEYS[2] holders hash  s:<pid> last seen (us)
-- KEYS[3] replies hash  <pid> -> "seq live v1 i1 v2 i2 ..." (the answer to the newest batch)
-- KEYS[4] leases hash   a stock only: h:<pid>:<key> the units of key's leases process pid
--                       holds unsold (as it last said, plus what it was leased since), and
--                       s:<key> the units of key stranded: taken from the stock by a process
--                       that can no longer sell or give them back (one whose holder expired
--                       while it held a lease, or a lease no replica acknowledged)
-- KEYS[4 + i]           a rate: key i's theoretical arrival time (us), expiring once it is in
--                       the past; a stock: the units of key i taken (sold or leased), kept
--                       (absent: none taken)
-- ARGV: pid, seq, T (us), B, holder ttl (us), flags (bit 1, touch: refresh this holder's
--   liveness and count the live holders, as a batch with a lease always does; bit 2, on shard
--   0 only: mark the limit complete, sent by a process that has seen every shard carry shard
--   0's epoch), known epoch (0: none yet),
--   fresh epoch (used if this batch creates the limit), then for each key i: op_i, n_i
--   op 'g' check n units, all or nothing (a cold check passed through)
--   op 'l' lease up to n units, at most max(1, B / (2 live)) (a hot key's local pool); a
--          stock: at most max(1, left / (2 live)), so the last units are not all leased
--          into one process
--   op 'r' give n unadmitted leased units back (a stock: never below none taken)
--   op 'c' charge n units admitted during an outage, whatever the room (a stock never
--          falls back, so never charges; if sent, the units are taken, whatever is left)
--   op 'f' forget the key on purpose: its state is deleted, a fresh budget (an operator's
--          unblock), its stranded count and this process's holding with it; v is 1 when the
--          key held state, 0 when it was already fresh
--   op 'h' a stock: this process holds n units of the key's leases unsold now (its h: field
--          set, deleted at 0); the key's units taken are not touched; v = n
--   op 's' a stock: n units of the key this process took will never be sold (no replica
--          acknowledged their batch): added to the key's s: field (the process's next 'h'
--          leaves them out of its holding); v = n
-- A stock's 'l' adds what it leased to this process's h: field of the key. When a holder
-- expires (silent for the ttl), its h: fields are added to the keys' s: fields: the leases it
-- held unsold when it last spoke (an upper bound: it may have sold some since).
-- Reply: one string of integers separated by spaces (a long array costs Redis and the client
--   more to convert than one string, which the batch's stored answer needs anyway): flag (0
--   new, 1 repeated batch, 2 stale batch), live holders (0: not counted, the batch did not
--   touch), the limit's epoch, complete (1: this config is marked complete), v1, i1, v2, i2, ...
--
-- The epoch (as in lease.lua) is a random id written when the limit is created: a process that
-- knew it and finds no limit or another epoch knows Redis lost it. A per-key stock is then
-- marked forgotten and every batch fails (its counts of units taken are gone: never sold
-- afresh); a per-key rate goes on (a key's state expires anyway once its bucket is full again:
-- a lost one costs at most that key's burst once). On a cluster each shard has its config,
-- created with shard 0's epoch by whichever process reaches it first; until shard 0 is marked
-- complete (every shard seen created), a process sends a shard it has not seen as unknown, so
-- that one being created is not taken for one lost.
--   v: units checked (0 denied) / leased / given / charged
--   i: for 'g' and 'l', the units still available after it, or when none is (i <= 0) the
--      negated microseconds until one unit is (-1 when the check can never fit: n > B,
--      and for a stock whenever nothing is left: only a give-back brings units back)
--
-- Every number is an integer below 2^53 (times in microseconds); divisions are corrected to
-- exact floors; values are written back with %d.

local C, H, Q, L = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local pid, seq = ARGV[1], tonumber(ARGV[2])
local T, B, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local flags = tonumber(ARGV[6]) or 0
local touch = flags % 2 == 1
local mark = flags >= 2
local known, fresh = tonumber(ARGV[7]) or 0, tonumber(ARGV[8]) or 1
local nops = #KEYS - 4
-- A key's Redis name is the configuration's prefix, 'k:', then the key.
local kskip = #C - #'kconf' + #'k:'
for k = 1, nops do
  if ARGV[7 + 2 * k] == 'l' then touch = true end
end

local function int(x) return string.format('%d', x) end

-- floor(a / b) for integers a >= 0, b > 0, exact although Lua divides in doubles.
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local FORGOTTEN = 'CELLGATE_FORGOTTEN redis lost this per-key stock (restarted without persistence, or a failover to a replica that lagged): it is not sold afresh; reset it (see the README)'
local conf = redis.call('HMGET', C, 'T', 'B', 'epoch', 'forgotten', 'complete')
local epoch = tonumber(conf[3] or '0') or 0
if not conf[1] then
  if known ~= 0 and T == 0 then
    redis.call('HSET', C, 'T', int(T), 'B', int(B), 'forgotten', '1')
    return redis.error_reply(FORGOTTEN)
  end
  redis.call('HSET', C, 'T', int(T), 'B', int(B), 'epoch', int(fresh), 'complete', '0')
  epoch = fresh
elseif tonumber(conf[1]) ~= T or tonumber(conf[2]) ~= B then
  return redis.error_reply('CELLGATE keyed limit exists with another configuration')
end
if conf[4] then return redis.error_reply(FORGOTTEN) end
if epoch == 0 then
  -- A limit created before epochs existed: it gets one now.
  epoch = fresh
  redis.call('HSET', C, 'epoch', int(fresh))
end
if known ~= 0 and known ~= epoch and T == 0 then
  redis.call('HSET', C, 'forgotten', '1')
  return redis.error_reply(FORGOTTEN)
end
-- A config without the field predates the mark: it counts as complete, as every shard was
-- then taken for created (a missing one for lost).
local complete = 0
if conf[1] and conf[5] ~= '0' then complete = 1 end
if mark and complete == 0 and known == epoch then
  redis.call('HSET', C, 'complete', '1')
  complete = 1
end

-- A batch is executed once: a retry of the same sequence gets the first answer, an older one
-- changes nothing.
-- The stored answer is "seq live v1 i1 ...".
local last = redis.call('HGET', Q, pid)
if last then
  local before, lv, rest = string.match(last, '^(%-?%d+) (%-?%d+)(.*)$')
  before = tonumber(before)
  if before and seq == before then
    return '1 ' .. lv .. ' ' .. int(epoch) .. ' ' .. complete .. rest
  end
  if before and seq < before then
    return '2 ' .. lv .. ' ' .. int(epoch) .. ' ' .. complete
  end
end

-- Live holders (silent longer than the ttl: forgotten; a rate holder leaves nothing behind),
-- counted only when the batch touches: a process touches at least once a heartbeat.
local stock = T == 0
local live = 0
if touch then
  live = 1
  local dead = {}
  local all = redis.call('HGETALL', H)
  for i = 1, #all, 2 do
    local p = string.sub(all[i], 3)
    if p ~= pid then
      if tonumber(all[i + 1]) + ttl < now then
        redis.call('HDEL', H, all[i])
        dead[p] = true
      else
        live = live + 1
      end
    end
  end
  redis.call('HSET', H, 's:' .. pid, int(now))
  -- A stock's dead holders: what they held leased is stranded, per key. Read only when a
  -- holder expired (rare: once per process that died or was cut off for the ttl).
  if stock and next(dead) then
    local held = redis.call('HGETALL', L)
    local add = {}
    for i = 1, #held, 2 do
      local f = held[i]
      if string.sub(f, 1, 2) == 'h:' then
        local sep = string.find(f, ':', 3, true)
        if sep and dead[string.sub(f, 3, sep - 1)] then
          local key = string.sub(f, sep + 1)
          add[key] = (add[key] or 0) + (tonumber(held[i + 1]) or 0)
          redis.call('HDEL', L, f)
        end
      end
    end
    for key, units in pairs(add) do
      if units > 0 then redis.call('HINCRBY', L, 's:' .. key, int(units)) end
    end
  end
end

local lease_cap = math.max(1, fdiv(B, 2 * live))
local room = B * T
local tats = {}
-- One read for every key of the batch.
local stored = {}
if #KEYS > 4 then stored = redis.call('MGET', unpack(KEYS, 5)) end
-- Each key's "v i", in order.
local results = {}
for k = 1, nops do
  local key = KEYS[4 + k]
  local op, n = ARGV[7 + 2 * k], tonumber(ARGV[8 + 2 * k])
  local tat = tats[key]
  if not tat then tat = tonumber(stored[k]) or 0 end
  if tat < now and not stock then tat = now end
  local v, info = 0, 0
  -- This process's holding field of the key: a stock's only (a new string costs per key).
  local mine
  if stock then mine = 'h:' .. pid .. ':' .. string.sub(key, kskip + 1) end
  if op == 'f' then
    if (stock and tat > 0) or (not stock and tat > now) then v = 1 end
    tat = 0
    if stock then redis.call('HDEL', L, mine, 's:' .. string.sub(key, kskip + 1)) end
  elseif op == 'h' or op == 's' then
    -- Records only: the key's units taken do not change (nor is it written back).
    if stock then
      v = n
      if op == 's' then
        if n > 0 then redis.call('HINCRBY', L, 's:' .. string.sub(key, kskip + 1), int(n)) end
      elseif n > 0 then
        redis.call('HSET', L, mine, int(n))
      else
        redis.call('HDEL', L, mine)
      end
    end
  elseif stock then
    -- tat: the units taken; B - tat left.
    local left = B - tat
    if left < 0 then left = 0 end
    if op == 'g' then
      if n <= left then v = n end
      tat = tat + v
    elseif op == 'l' then
      v = math.min(n, left, math.max(1, fdiv(left, 2 * live)))
      tat = tat + v
      if v > 0 then redis.call('HINCRBY', L, mine, int(v)) end
    elseif op == 'r' then
      v = n
      tat = math.max(0, tat - n)
    elseif op == 'c' then
      v = n
      tat = tat + n
    end
    if op == 'g' or op == 'l' then
      info = B - tat
      if info <= 0 then info = -1 end
    end
  elseif op == 'g' or op == 'l' then
    local free = now + room - tat
    local avail = 0
    if free > 0 then avail = fdiv(free, T) end
    if op == 'g' then
      if n <= avail then v = n end
    else
      v = math.min(n, avail, lease_cap)
    end
    tat = tat + v * T
    avail = avail - v
    if avail > 0 or (op == 'g' and v > 0) then
      info = avail
    elseif op == 'g' and n > B then
      info = -1
    else
      -- Until the next unit (a lease) or the n units (a check) are free again.
      local want = 1
      if op == 'g' then want = n end
      info = -math.max(1, tat + want * T - room - now)
    end
  elseif op == 'r' then
    v = n
    tat = tat - n * T
  elseif op == 'c' then
    v = n
    tat = tat + n * T
  end
  if op ~= 'h' and op ~= 's' then tats[key] = tat end
  results[k] = string.format('%d %d', v, info)
end
for key, tat in pairs(tats) do
  if stock then
    -- Kept as long as the stock is: what was taken is never forgotten.
    if tat > 0 then redis.call('SET', key, int(tat)) else redis.call('DEL', key) end
  elseif tat > now then
    -- Gone once it is in the past (the server's own clock decides both), when the key is
    -- as good as new: Redis holds only keys with a debt.
    redis.call('SET', key, int(tat), 'PX', int(fdiv(tat - now + 999, 1000)))
  else
    redis.call('DEL', key)
  end
end
local tail = ''
if nops > 0 then tail = ' ' .. table.concat(results, ' ') end
redis.call('HSET', Q, pid, int(seq) .. ' ' .. int(live) .. tail)
return '0 ' .. int(live) .. ' ' .. int(epoch) .. ' ' .. complete .. tail
