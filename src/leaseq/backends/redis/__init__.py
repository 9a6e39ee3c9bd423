"""redis:// — the delay-queue design of seed 002 grown up: Lua scripts over sorted sets,
one per state change, with the semantics of every other backend (docs/redis.md)."""
