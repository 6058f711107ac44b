"""The Lua scripts behind `RedisLimiter`: each runs atomically, so replicas never race.

Money counters are integers of 1e-10 USD in hash fields (`used` = spent + held, `spent`),
changed only with HINCRBY (exact in 64 bits) and compared as decimal strings, because a
Lua number is a double and would round amounts over 2^53 units (about $900,000).
Per budget window, B is the counters' hash (`h:<id>` fields are the holds) and E a
sorted set of hold deadlines, so that holds never settled are given back on next touch.
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
local function sweep(b, e, now)
  local expired = redis.call('ZRANGEBYSCORE', e, '-inf', now)
  for _, id in ipairs(expired) do
    local held = redis.call('HGET', b, 'h:' .. id)
    if held then
      sub(b, 'used', held)
      redis.call('HDEL', b, 'h:' .. id)
    end
  end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', e, '-inf', now) end
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

# KEYS: B1, E1, ... Bn, En, R1 ... Rm (rate TATs)
# ARGV: now_ms, id, deadline_ms, n, m, then per budget (amount, limit, keep_s),
#       then per rate (cost, ms_per_unit)
# Returns {2} when held, {0, i, used, spent} when budget i refuses,
#         {1, j, over_ms} when rate j refuses (nothing is changed on a refusal).
RESERVE = (
    _HELPERS
    + """
local now, id, deadline = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local n, m = tonumber(ARGV[4]), tonumber(ARGV[5])
local function undo(upto)
  for k = 1, upto do sub(KEYS[2 * k - 1], 'used', ARGV[5 + (k - 1) * 3 + 1]) end
end
for i = 1, n do
  local b, e, at = KEYS[2 * i - 1], KEYS[2 * i], 5 + (i - 1) * 3
  sweep(b, e, now)
  redis.call('HINCRBY', b, 'used', ARGV[at + 1])
  local used = redis.call('HGET', b, 'used')
  if gt(used, ARGV[at + 2]) then
    undo(i)
    return {0, i, redis.call('HGET', b, 'used'), redis.call('HGET', b, 'spent') or '0'}
  end
end
local tats = {}
for j = 1, m do
  local at = 5 + n * 3 + (j - 1) * 2
  local tat = tonumber(redis.call('GET', KEYS[2 * n + j]) or '0')
  local new = math.max(tat, now) + tonumber(ARGV[at + 1]) * tonumber(ARGV[at + 2])
  if new - now > 60000 then
    undo(n)
    return {1, j, string.format('%.3f', new - now - 60000)}
  end
  tats[j] = new
end
for i = 1, n do
  local b, e, at = KEYS[2 * i - 1], KEYS[2 * i], 5 + (i - 1) * 3
  redis.call('HSET', b, 'h:' .. id, ARGV[at + 1])
  redis.call('ZADD', e, deadline, id)
  keep(b, ARGV[at + 3])
  keep(e, ARGV[at + 3])
end
for j = 1, m do set_tat(KEYS[2 * n + j], tats[j], now) end
return {2}
"""
)

# KEYS: D (the settled marker), B1, E1, ... Bn, En, R1 ... Rm
# ARGV: id, now_ms, settled_keep_s, actual (units; '0' to release), n, m, move_rates (0|1),
#       then per budget (soft or '', keep_s), then per rate (delta_units, ms_per_unit)
# Returns {0} for a repeat, else {1, i, spent, ...} for each budget whose soft limit it crossed.
SETTLE = (
    _HELPERS
    + """
local id, now, actual = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local n, m = tonumber(ARGV[5]), tonumber(ARGV[6])
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[3]) then return {0} end
local reply = {1}
for i = 1, n do
  local b, e, at = KEYS[2 * i], KEYS[2 * i + 1], 7 + (i - 1) * 2
  local held = redis.call('HGET', b, 'h:' .. id)
  if held then
    sub(b, 'used', held)
    redis.call('HDEL', b, 'h:' .. id)
    redis.call('ZREM', e, id)
  end
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
if ARGV[7] == '1' then
  for j = 1, m do
    local at, key = 7 + n * 2 + (j - 1) * 2, KEYS[2 * n + 1 + j]
    local tat = redis.call('GET', key)
    local delta = tonumber(ARGV[at + 1]) * tonumber(ARGV[at + 2])
    if tat and delta ~= 0 then set_tat(key, tonumber(tat) + delta, now) end
  end
end
return reply
"""
)

# KEYS: B, E; ARGV: now_ms. Returns {used, spent} after giving back expired holds.
USAGE = (
    _HELPERS
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0', '0'} end
sweep(KEYS[1], KEYS[2], tonumber(ARGV[1]))
return {redis.call('HGET', KEYS[1], 'used') or '0', redis.call('HGET', KEYS[1], 'spent') or '0'}
"""
)

# KEYS: B1 ... Bn; ARGV: per budget (units, keep_s). Adds spend counted elsewhere (in a
# process while Redis was away) to each window.
ADD_SPENT = (
    _HELPERS
    + """
for i, b in ipairs(KEYS) do
  redis.call('HINCRBY', b, 'used', ARGV[2 * i - 1])
  redis.call('HINCRBY', b, 'spent', ARGV[2 * i - 1])
  keep(b, ARGV[2 * i])
end
return #KEYS
"""
)
