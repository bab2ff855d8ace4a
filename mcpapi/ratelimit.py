"""Per-principal rate limit: a token bucket kept in Redis, so every process
serving MCP draws from the same bucket."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from mcpapi.client import Principal

# Redis's own clock, not each caller's, so processes with skewed clocks agree.
_TAKE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local capacity = tonumber(ARGV[1])
local per_ms = tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1])
local at = tonumber(state[2])
if tokens == nil or at == nil then
  tokens = capacity
  at = now
end
tokens = math.min(capacity, tokens + math.max(0, now - at) * per_ms)
local allowed = 0
local wait_ms = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  wait_ms = math.ceil((1 - tokens) / per_ms)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / per_ms) + 1000)
return {allowed, wait_ms}
"""


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_seconds: int


class RateLimiter:
    """`per_minute` requests a minute per principal, at most `burst` at once."""

    def __init__(self, *, redis_url: str, per_minute: int, burst: int, key_prefix: str) -> None:
        if per_minute <= 0 or burst <= 0:
            raise ValueError("per_minute and burst must be positive")
        self._redis: Redis = Redis.from_url(redis_url)
        self._take: Any = self._redis.register_script(_TAKE)
        self._per_ms = per_minute / 60_000
        self._burst = burst
        self._prefix = key_prefix

    def key(self, principal: Principal) -> str:
        identity = "\x00".join((principal.tenant, principal.kind, principal.subject))
        return self._prefix + hashlib.sha256(identity.encode()).hexdigest()

    async def take(self, principal: Principal) -> Decision:
        allowed, wait_ms = await self._take(keys=[self.key(principal)], args=[self._burst, repr(self._per_ms)])
        return Decision(allowed=bool(allowed), retry_after_seconds=max(1, math.ceil(int(wait_ms) / 1000)))

    async def aclose(self) -> None:
        await self._redis.aclose()
