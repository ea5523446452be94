-- Included by encodings.sql in a database of another encoding: names and
-- keys with bytes that are not UTF-8 (chr(n) for n > 127 is one byte here).
CREATE EXTENSION rate_limiter;
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SET rate_limiter.random_seed = 1;
SET intervalstyle = 'postgres';
SHOW server_encoding;
SELECT rate_limiter.define('caf' || chr(233), rate_limiter.token_bucket(2, '1 minute'));
SELECT ok, remaining FROM rate_limiter.rate_limit('caf' || chr(233), 'cl' || chr(233));
SELECT ok, remaining FROM rate_limiter.rate_limit('caf' || chr(233), 'cl' || chr(233));
-- Refused; with throws the message shows the bytes escaped, the DETAIL is
-- ASCII JSON with the characters as \u escapes.
SELECT * FROM rate_limiter.rate_limit('caf' || chr(233), 'cl' || chr(233));
SELECT * FROM rate_limiter.rate_limit('caf' || chr(233), 'cl' || chr(233), throws => true);
-- A key or name that differs in one byte is another limit.
SELECT ok, remaining FROM rate_limiter.rate_limit('caf' || chr(233), 'cl' || chr(232));
SELECT ok, remaining FROM rate_limiter.rate_limit('caf' || chr(255), chr(255) || chr(128),
    config => rate_limiter.token_bucket(1, '1 minute'));
SELECT ok, remaining FROM rate_limiter.rate_check('caf' || chr(233), 'cl' || chr(233));
-- Sharded, fixed window (its phase hashes the bytes), reservations.
SELECT ok, remaining FROM rate_limiter.rate_limit(chr(233), chr(233), 3,
    config => rate_limiter.fixed_window(4, '1 hour', shards => 2));
SELECT ok, retry_after FROM rate_limiter.rate_limit(chr(200), chr(201), 3, reserve => true,
    config => rate_limiter.token_bucket(1, '1 minute'));
-- Errors name the limit with its bytes escaped.
SELECT * FROM rate_limiter.rate_limit('unknown ' || chr(233));
SELECT rate_limiter.define('thin ' || chr(233), rate_limiter.token_bucket(4, '1 minute', shards => 2));
-- What is stored is the bytes given.
SELECT encode(convert_to(name, current_setting('server_encoding')), 'hex') AS name,
       encode(convert_to(key, current_setting('server_encoding')), 'hex') AS key, shard, value
FROM rate_limiter.rate_limits ORDER BY 1, 2, 3;
SELECT encode(convert_to(name, current_setting('server_encoding')), 'hex') AS name, rate, shards
FROM rate_limiter.definitions ORDER BY 1;
-- Reset and undefine find them by their bytes.
SELECT rate_limiter.rate_reset('caf' || chr(233), 'cl' || chr(233));
SELECT rate_limiter.undefine('caf' || chr(233)), rate_limiter.undefine('thin ' || chr(233));
SELECT count(*) AS rows_left_for_the_key FROM rate_limiter.rate_limits WHERE key = 'cl' || chr(233);
SELECT count(*) AS definitions_left FROM rate_limiter.definitions;
