/// The fleet's rules as scripts on the server: every decision and every report is one script, atomic on the server
/// and timed by the server's clock (`TIME`), never a replica's. They follow the test kit's `FleetLedger` rule for rule.
///
/// Keys, all under the configured prefix in braces (one hash slot, so a cluster runs the scripts too):
/// - `KEYS[1]`, `{prefix}:fleet`: a hash of the bucket (`tokens`, `refilled`), the hold (`hold`, `nextProbe`,
///   `probe`), the outages in a row (`outages`), the lease counter (`seq`) and the latest millisecond seen (`clock`),
///   which the scripts' time never goes behind;
/// - `KEYS[2]`, `{prefix}:inflight`: a sorted set of the leases in flight by the millisecond they lapse at;
/// - `KEYS[3]`, `{prefix}:lease:{account}`: the account's lease, expiring with it (only when credentials are shared);
/// - `KEYS[4]`, `{prefix}:shared:{account}`: the account's shared credential (`expiresAt`, `json`, and `started`, the
///   millisecond its fetch started, or `-1` when unknown), expiring when it does;
/// - `KEYS[5]`, `{prefix}:fence:{account}`: the fence, the millisecond of the first report of a rejection of the
///   account's credentials (`at`), the latest expiry reported rejected since (`expiresAt`; the report's time if that
///   had passed), expiring a day after it, and the earliest expiry of a credential fetched since (`firstSince`).
enum RedisScripts {
    /// Decides a fetch. `ARGV`: the held credential's expiry in Unix seconds (empty for none), then the limits:
    /// starts per second, burst, most in flight, lease milliseconds, probe milliseconds, sharing (`1` or `0`), peer
    /// poll milliseconds; whether the service rejected the held credential (`1` or `0`); last the reservation the fetch
    /// carries (empty for none). Returns `{'start', lease}`, `{'await', ms}`, `{'shared', json}`, `{'hold', ms,
    /// reason}` or `{'reserved', name, ms}`. A reservation is named `reserved-{era}-{ms}`: the hold count it was made
    /// in (`era` in `KEYS[1]`) and the millisecond its start comes.
    static let decide = """
        local time = redis.call('TIME')
        local wall = tonumber(time[1])
        local now = wall * 1000 + math.floor(tonumber(time[2]) / 1000)
        -- The fleet's milliseconds never go back, whatever the server's clock does: they order leases and fences.
        local latest = tonumber(redis.call('HGET', KEYS[1], 'clock') or '0')
        if now < latest then now = latest else redis.call('HSET', KEYS[1], 'clock', now) end
        local held = ARGV[1]
        local rate, burst, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
        local leaseMs, probeMs, shares, pollMs = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
        redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
        local probe = redis.call('HGET', KEYS[1], 'probe')
        if probe and not redis.call('ZSCORE', KEYS[2], probe) then
          redis.call('HDEL', KEYS[1], 'probe')
          probe = false
        end
        local function take()
          local name = redis.call('HINCRBY', KEYS[1], 'seq', 1) .. '-' .. now
          redis.call('ZADD', KEYS[2], now + leaseMs, name)
          if shares then redis.call('SET', KEYS[3], name, 'PX', leaseMs) end
          return name
        end
        if shares then
          -- After a rejection only a fetch started at or after the fence counts: one before may carry the old secret.
          -- The fence moves only when a rejected credential expires no earlier than one fetched since: a new rotation.
          local fence = nil
          local function startedSince(start, at) return start ~= nil and start >= 0 and start >= at end
          if held ~= '' and ARGV[9] ~= '1' then
            -- A fetch that does not follow a rejection respects a fence it finds, and neither sets nor moves one.
            local at = redis.call('HGET', KEYS[5], 'at')
            if at then fence = tonumber(at) end
          elseif held ~= '' then
            local heldAt = tonumber(held)
            local kept = redis.call('HMGET', KEYS[5], 'expiresAt', 'at', 'firstSince')
            if kept[2] then
              local rotatedAgain = kept[3] and heldAt >= tonumber(kept[3])
              if not rotatedAgain then
                fence = tonumber(kept[2])
                if heldAt > tonumber(kept[1]) and heldAt < wall + 172800 then
                  redis.call('HSET', KEYS[5], 'expiresAt', held)
                  redis.call('EXPIREAT', KEYS[5], heldAt + 86400)
                end
              end
            end
            if fence == nil then
              fence = now
              redis.call('DEL', KEYS[5])
              -- Kept a day past the rejected credential's expiry, or past now if it has expired: the queue that
              -- follows a rotation may take longer than the credentials' lifetime, and until every credential
              -- fetched before the rotation has expired only a fetch started since is shared.
              if heldAt < wall + 172800 then
                local rejectedAt = math.max(heldAt, wall)
                redis.call('HSET', KEYS[5], 'expiresAt', rejectedAt, 'at', now)
                redis.call('EXPIREAT', KEYS[5], rejectedAt + 86400)
              end
            end
          end
          local function after(start) return fence == nil or startedSince(start, fence) end
          local kept = redis.call('HMGET', KEYS[4], 'expiresAt', 'json', 'started')
          if kept[1] then
            local expiresAt = tonumber(kept[1])
            if expiresAt <= wall then
              redis.call('DEL', KEYS[4])
            elseif held ~= '' and expiresAt > tonumber(held) and after(tonumber(kept[3] or '-1')) then
              return {'shared', kept[2]}
            end
          end
          if held ~= '' then
            local holder = redis.call('GET', KEYS[3])
            local era, at = nil, nil
            if holder then era, at = string.match(holder, '^reserved%-(%d+)%-(%d+)$') end
            if era then
              -- Another replica's fetch of the account has a start reserved: wait for that start, then its fetch,
              -- rather than queue a second start; the reservation lapses a lease's duration after its start.
              local hold = redis.call('HGET', KEYS[1], 'hold')
              if tonumber(at) + leaseMs > now and era == (redis.call('HGET', KEYS[1], 'era') or '')
                and holder ~= ARGV[10] and not (hold and hold ~= '') then
                return {'hold', math.max(0, tonumber(at) - now) + pollMs, 'budget'}
              end
            else
              local lapse = holder and redis.call('ZSCORE', KEYS[2], holder)
              if lapse and after(tonumber(string.match(holder, '-(%d+)$'))) then
                return {'await', math.max(1, math.min(pollMs, tonumber(lapse) - now))}
              end
            end
          end
        end
        local hold = redis.call('HGET', KEYS[1], 'hold')
        if hold and hold ~= '' then
          local nextProbe = tonumber(redis.call('HGET', KEYS[1], 'nextProbe') or '0')
          if probe then return {'hold', probeMs, hold} end
          if now < nextProbe then return {'hold', nextProbe - now, hold} end
          local name = take()
          redis.call('HSET', KEYS[1], 'probe', name)
          return {'start', name}
        end
        local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or burst)
        local refilled = tonumber(redis.call('HGET', KEYS[1], 'refilled') or now)
        tokens = math.min(burst, tokens + math.max(0, now - refilled) * rate / 1000)
        redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'refilled', math.max(refilled, now))
        if redis.call('ZCARD', KEYS[2]) >= most then return {'hold', math.max(1, math.ceil(1000 / rate)), 'budget'} end
        local era = redis.call('HGET', KEYS[1], 'era')
        if not era then
          -- A server that starts empty begins an era of its own: no reservation of an earlier server is taken.
          era = tostring(now)
          redis.call('HSET', KEYS[1], 'era', era)
        end
        local reservedEra, reservedAt = string.match(ARGV[10], '^reserved%-(%d+)%-(%d+)$')
        if reservedEra == era and tonumber(reservedAt) + 1000 >= now then
          -- Counted when it was reserved. One that comes more than a second late (held at the fetches in flight, a
          -- replica paused) has lost its start and queues again: due starts never pile up into a burst.
          reservedAt = tonumber(reservedAt)
          if reservedAt > now then return {'reserved', ARGV[10], reservedAt - now} end
          return {'start', take()}
        end
        tokens = tokens - 1
        redis.call('HSET', KEYS[1], 'tokens', tostring(tokens))
        if tokens < 0 then
          -- The next free start: when the bucket, refilling, has made up every start counted before it.
          local at = now + math.max(1, math.ceil(-tokens * 1000 / rate))
          local name = 'reserved-' .. era .. '-' .. at
          if shares and held ~= '' then redis.call('SET', KEYS[3], name, 'PX', at - now + leaseMs) end
          return {'reserved', name, at - now}
        end
        return {'start', take()}
        """

    /// Records how a fetch ended. `ARGV`: the lease (empty for a fetch decided locally), the outcome (`credential`,
    /// `issued`, `outage`, `retryAfter`, `refused`, `abandoned`), the credential's expiry in Unix seconds and its JSON
    /// (empty unless shared), the `Retry-After` pause in milliseconds, then the limits: outages in a row that begin the
    /// hold, probe milliseconds, sharing; last the start reserved for a fetch without a lease (empty for none), which no
    /// longer holds the account. Returns 1.
    static let ended = """
        local time = redis.call('TIME')
        local wall = tonumber(time[1])
        local now = wall * 1000 + math.floor(tonumber(time[2]) / 1000)
        -- The fleet's milliseconds never go back, whatever the server's clock does: they order leases and fences.
        local latest = tonumber(redis.call('HGET', KEYS[1], 'clock') or '0')
        if now < latest then now = latest else redis.call('HSET', KEYS[1], 'clock', now) end
        local lease, outcome = ARGV[1], ARGV[2]
        local threshold, probeMs, shares = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1'
        -- When the fetch started, if its lease was still in flight: the lease's name ends with that millisecond.
        local started = -1
        if lease ~= '' and redis.call('ZREM', KEYS[2], lease) == 1 then
          started = tonumber(string.match(lease, '-(%d+)$')) or -1
          if redis.call('GET', KEYS[3]) == lease then redis.call('DEL', KEYS[3]) end
          if redis.call('HGET', KEYS[1], 'probe') == lease then redis.call('HDEL', KEYS[1], 'probe') end
        end
        -- A start reserved for a fetch that did not take it no longer holds the account's other replicas.
        if lease == '' and ARGV[9] ~= '' and redis.call('GET', KEYS[3]) == ARGV[9] then redis.call('DEL', KEYS[3]) end
        local function answered()
          redis.call('HSET', KEYS[1], 'outages', 0, 'hold', '')
          redis.call('HDEL', KEYS[1], 'probe')
        end
        -- The hold begins: every reservation lapses, and the starts they counted are given back, so the fetches held
        -- meanwhile queue again at the fleet's rate when it ends.
        local function beginHold(reason)
          local hold = redis.call('HGET', KEYS[1], 'hold')
          if not hold or hold == '' then
            if redis.call('HEXISTS', KEYS[1], 'era') == 1 then
              redis.call('HINCRBY', KEYS[1], 'era', 1)
            else
              redis.call('HSET', KEYS[1], 'era', now)
            end
            local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or '0')
            if tokens < 0 then redis.call('HSET', KEYS[1], 'tokens', '0') end
          end
          redis.call('HSET', KEYS[1], 'hold', reason)
        end
        local function nextProbeAtLeast(at)
          local nextProbe = tonumber(redis.call('HGET', KEYS[1], 'nextProbe') or '0')
          redis.call('HSET', KEYS[1], 'nextProbe', math.max(nextProbe, at))
        end
        if outcome == 'credential' then
          answered()
          local expiresAt = tonumber(ARGV[3])
          -- Only a credential that expires within two days: no replica installs a longer one, and the expiry is then
          -- an integer that EXPIREAT takes as it was given.
          if shares and ARGV[4] ~= '' and expiresAt and expiresAt > wall and expiresAt < wall + 172800 then
            -- A credential fetched since the account's fence carried the new secret: its rejection is a new rotation.
            local at = tonumber(redis.call('HGET', KEYS[5], 'at') or '-1')
            if started >= 0 and at >= 0 and started >= at then
              local first = tonumber(redis.call('HGET', KEYS[5], 'firstSince') or ARGV[3])
              redis.call('HSET', KEYS[5], 'firstSince', math.min(first, expiresAt))
            end
            -- One that expires as late replaces the kept one: it was reported later.
            local kept = tonumber(redis.call('HGET', KEYS[4], 'expiresAt') or '0')
            if kept <= expiresAt then
              redis.call('HSET', KEYS[4], 'expiresAt', ARGV[3], 'json', ARGV[4], 'started', started)
              redis.call('EXPIREAT', KEYS[4], ARGV[3])
            end
          end
        elseif outcome == 'issued' or outcome == 'refused' then
          answered()
        elseif outcome == 'outage' then
          local outages = redis.call('HINCRBY', KEYS[1], 'outages', 1)
          local hold = redis.call('HGET', KEYS[1], 'hold')
          if hold and hold ~= '' then
            nextProbeAtLeast(now + probeMs)
          elseif outages >= threshold then
            beginHold('outage')
            redis.call('HSET', KEYS[1], 'nextProbe', now + probeMs)
          end
        elseif outcome == 'retryAfter' then
          if redis.call('HGET', KEYS[1], 'hold') ~= 'outage' then beginHold('retryAfter') end
          nextProbeAtLeast(now + tonumber(ARGV[5]))
        end
        return 1
        """
}
