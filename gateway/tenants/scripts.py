"""The Lua scripts behind `RedisLimiter`: each runs atomically, so replicas never race.

Money counters are integers of 1e-10 USD in hash fields (`used` = spent + held, `spent`),
changed only with HINCRBY (exact in 64 bits) and compared as decimal strings, because a
Lua number is a double and would round amounts over 2^53 units (about $900,000).

Per budget window, B is the counters' hash and E a sorted set of deadlines. A hold is the
field `h:<id>` of B (its deadline in E under `<id>`). When a hold's deadline passes, the
next script to touch B gives it back and leaves the marker `x:<id>` (kept a day, in E
under `x:<id>`), so that a settle arriving late still counts its cost once. A settle that
finds neither has been counted already: idempotency costs nothing per settled request.
A reservation with no budget keeps a live key L instead, for as long as it may be held.
"""

from __future__ import annotations

_HELPERS = """
local function gt(a, b)  -- non-negative integers as strings: a > b
  if #a ~= #b then return #a > #b end
  return a > b
end
local function sub(key, field, units)
  if units ~= '0' then redis.call('HINCRBY', key, field, '-' .. units) end
end
local function sweep(b, e, now, expired_keep_ms)
  local due = redis.call('ZRANGEBYSCORE', e, '-inf', now)
  if #due == 0 then return end
  redis.call('ZREMRANGEBYSCORE', e, '-inf', now)
  local until_ms = string.format('%.0f', tonumber(now) + tonumber(expired_keep_ms))
  for _, member in ipairs(due) do
    if string.sub(member, 1, 2) == 'x:' then
      redis.call('HDEL', b, member)
    else
      local held = redis.call('HGET', b, 'h:' .. member)
      if held then
        sub(b, 'used', held)
        redis.call('HDEL', b, 'h:' .. member)
        redis.call('HSET', b, 'x:' .. member, '1')
        redis.call('ZADD', e, until_ms, 'x:' .. member)
      end
    end
  end
end
local function shaped(key, kind)  -- absent, or of the type Farebox writes
  local found = redis.call('TYPE', key).ok
  return found == 'none' or found == kind
end
local function keep(key, seconds)
  if seconds ~= '0' then redis.call('EXPIRE', key, seconds) end
end
local function set_tat(key, tat, now)
  if tat <= now then
    redis.call('DEL', key)
  else
    redis.call('SET', key, string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
  end
end
"""

# KEYS: B1, E1, ... Bn, En, R1 ... Rm (rate TATs), L
# ARGV: now_ms, id, deadline_ms, n, m, hold_ms, expired_keep_ms,
#       then per budget (amount, limit, keep_s), then per rate (cost, ms_per_unit)
# Returns {2} when held, {0, i, used, spent} when budget i refuses,
#         {1, j, over_ms} when rate j refuses (nothing is held on a refusal).
# A key of another type (written by something else) is refused first, with WRONGTYPE:
# found after an earlier window had its hold added, it would leave that hold for good.
RESERVE = (
    _HELPERS
    + """
local now, id, deadline = ARGV[1], ARGV[2], ARGV[3]
local n, m, base = tonumber(ARGV[4]), tonumber(ARGV[5]), 7
for i = 1, 2 * n + m do
  local kind = i > 2 * n and 'string' or (i % 2 == 1 and 'hash' or 'zset')
  if not shaped(KEYS[i], kind) then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' is no ' .. kind)
  end
end
local function undo(upto)
  for k = 1, upto do sub(KEYS[2 * k - 1], 'used', ARGV[base + (k - 1) * 3 + 1]) end
end
for i = 1, n do
  local b, e, at = KEYS[2 * i - 1], KEYS[2 * i], base + (i - 1) * 3
  sweep(b, e, now, ARGV[7])
  redis.call('HINCRBY', b, 'used', ARGV[at + 1])
  local used = redis.call('HGET', b, 'used')
  if gt(used, ARGV[at + 2]) then
    undo(i)
    return {0, i, redis.call('HGET', b, 'used'), redis.call('HGET', b, 'spent') or '0'}
  end
end
local tats, now_n = {}, tonumber(now)
for j = 1, m do
  local at = base + n * 3 + (j - 1) * 2
  local tat = tonumber(redis.call('GET', KEYS[2 * n + j]) or '0')
  local new = math.max(tat, now_n) + tonumber(ARGV[at + 1]) * tonumber(ARGV[at + 2])
  if new - now_n > 60000 then
    undo(n)
    return {1, j, string.format('%.3f', new - now_n - 60000)}
  end
  tats[j] = new
end
for i = 1, n do
  local b, e, at = KEYS[2 * i - 1], KEYS[2 * i], base + (i - 1) * 3
  redis.call('HSET', b, 'h:' .. id, ARGV[at + 1])
  redis.call('ZADD', e, deadline, id)
  keep(b, ARGV[at + 3])
  keep(e, ARGV[at + 3])
end
for j = 1, m do set_tat(KEYS[2 * n + j], tats[j], now_n) end
if n == 0 then redis.call('SET', KEYS[2 * n + m + 1], '1', 'PX', ARGV[6]) end
return {2}
"""
)

# KEYS: L, B1, E1, ... Bn, En, R1 ... Rm
# ARGV: id, now_ms, actual (units; '0' to release), n, m, move_rates (0|1),
#       then per budget (soft or '', keep_s), then per rate (delta_units, ms_per_unit)
# Returns {0} when every window had it already, else {1, i, spent, ...} for each budget
# whose soft limit this settle crossed. Rates move only on the first settle in time.
# A window or rate key of another type (written by something else) is passed over: the
# others are settled, where an error would have stopped the settle at it.
SETTLE = (
    _HELPERS
    + """
local id, now, actual = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local n, m, base = tonumber(ARGV[4]), tonumber(ARGV[5]), 6
local reply, first = {0}, false
for i = 1, n do
  local b, e, at = KEYS[2 * i], KEYS[2 * i + 1], base + (i - 1) * 2
  if shaped(b, 'hash') and shaped(e, 'zset') then
    local held = redis.call('HGET', b, 'h:' .. id)
    local found = held ~= false
    if found then
      sub(b, 'used', held)
      redis.call('HDEL', b, 'h:' .. id)
      redis.call('ZREM', e, id)
      first = first or i == 1
    elseif redis.call('HDEL', b, 'x:' .. id) == 1 then
      redis.call('ZREM', e, 'x:' .. id)
      found = true
    end
    if found then
      reply[1] = 1
      if actual ~= '0' then
        local before = redis.call('HGET', b, 'spent') or '0'
        redis.call('HINCRBY', b, 'used', actual)
        redis.call('HINCRBY', b, 'spent', actual)
        local after, soft = redis.call('HGET', b, 'spent'), ARGV[at + 1]
        if soft ~= '' and gt(soft, before) and not gt(soft, after) then
          reply[#reply + 1] = i
          reply[#reply + 1] = after
        end
        keep(b, ARGV[at + 2])
      end
    end
  end
end
if n == 0 and redis.call('DEL', KEYS[1]) == 1 then
  reply[1], first = 1, true
end
if first and ARGV[6] == '1' then
  for j = 1, m do
    local at, key = base + n * 2 + (j - 1) * 2, KEYS[2 * n + 1 + j]
    local tat = shaped(key, 'string') and redis.call('GET', key)
    local delta = tonumber(ARGV[at + 1]) * tonumber(ARGV[at + 2])
    if tat and delta ~= 0 then set_tat(key, tonumber(tat) + delta, now) end
  end
end
return reply
"""
)

# KEYS: L, B1, E1, ... Bn, En; ARGV: id, now_ms, hold_ms, expired_keep_ms.
# Moves the reservation's deadline to now + hold_ms in each window that still holds it
# (a hold past its deadline is swept first, never brought back); with no budget, extends
# L. Returns the number of holds renewed (0: settled, released or expired).
RENEW = (
    _HELPERS
    + """
local id, now = ARGV[1], ARGV[2]
local deadline = string.format('%.0f', tonumber(now) + tonumber(ARGV[3]))
local renewed = 0
for i = 2, #KEYS, 2 do
  local b, e = KEYS[i], KEYS[i + 1]
  sweep(b, e, now, ARGV[4])
  if redis.call('HEXISTS', b, 'h:' .. id) == 1 then
    redis.call('ZADD', e, 'XX', deadline, id)
    renewed = renewed + 1
  end
end
if #KEYS == 1 then renewed = redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return renewed
"""
)

# KEYS: B, E; ARGV: now_ms, expired_keep_ms. Returns {used, spent} after the sweep.
USAGE = (
    _HELPERS
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0', '0'} end
sweep(KEYS[1], KEYS[2], ARGV[1], ARGV[2])
return {redis.call('HGET', KEYS[1], 'used') or '0', redis.call('HGET', KEYS[1], 'spent') or '0'}
"""
)

# KEYS: B1 ... Bn; ARGV: per budget (units, keep_s). Adds spend counted elsewhere (in a
# process while Redis was away) to each window. A window Redis holds as another type
# (written there by something else) is skipped: an error would leave the windows before
# it added to, and every later push would add them again.
ADD_SPENT = (
    _HELPERS
    + """
for i, b in ipairs(KEYS) do
  if shaped(b, 'hash') then
    redis.call('HINCRBY', b, 'used', ARGV[2 * i - 1])
    redis.call('HINCRBY', b, 'spent', ARGV[2 * i - 1])
    keep(b, ARGV[2 * i])
  end
end
return #KEYS
"""
)
