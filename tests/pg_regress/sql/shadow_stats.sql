-- What statistics counted of shadow.sql's calls (the test before this
-- one; the server preloads the library): its shadow refusals are
-- shadow_refused. (Apart from shadow.sql because the portable edition has
-- no statistics (docs/guarantees.md, "Portable edition"): its schedule
-- leaves this out.)
SELECT name, calls, admitted, refused, reserved, tokens, near_limit, shadow_refused
FROM rate_limiter.stats WHERE name LIKE 'shadow%' ORDER BY name;
