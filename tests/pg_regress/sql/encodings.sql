-- Names and keys are opaque bytes in every database encoding: in LATIN1
-- and SQL_ASCII databases (what initdb picks on a machine without a UTF-8
-- locale), names and keys whose bytes are not UTF-8 work like any other,
-- distinct bytes are distinct limits, and messages show such bytes as
-- \xNN (ASCII reads the same in every encoding) while the refusal DETAIL
-- carries them as JSON \u escapes: Unicode converted from LATIN1, and
-- byte b as U+00b from SQL_ASCII (where bytes above 127 mean nothing).
SELECT current_database() AS regression_database \gset
CREATE DATABASE rl_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE rl_sql_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;

\c rl_latin1
\i tests/pg_regress/sql/include/encoding_corpus.sql

\c rl_sql_ascii
\i tests/pg_regress/sql/include/encoding_corpus.sql

-- A multibyte server encoding other than UTF8: EUC_JP, with a UTF8 client
-- (the server converts every text both ways). Names and keys round-trip;
-- the stored bytes are EUC_JP's (two bytes per character here). Messages
-- show the non-ASCII bytes as \xNN, as in every encoding but UTF8, so
-- they survive any client encoding; the refusal's JSON DETAIL carries the
-- characters (\u escapes of their Unicode), which a client reads back as
-- the same text; statistics show the names converted. An HTTP field needs
-- an ASCII limit name (22023).
CREATE DATABASE rl_euc_jp ENCODING 'EUC_JP' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c rl_euc_jp
\encoding UTF8
SHOW server_encoding;
SHOW client_encoding;
CREATE EXTENSION rate_limiter;
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('送信', rate_limiter.token_bucket(2, '1 hour'));
SELECT ok, remaining FROM rate_limiter.rate_limit('送信', 'ユーザー');
SELECT ok, remaining FROM rate_limiter.rate_limit('送信', 'ユーザー');
SELECT ok, retry_after FROM rate_limiter.rate_limit('送信', 'ユーザー');
SELECT ok FROM rate_limiter.rate_limit('送信', 'ユーザ');
SELECT name, key, octet_length(name) AS name_bytes, octet_length(key) AS key_bytes, value
FROM rate_limiter.rate_limits ORDER BY key;
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('送信', 'ユーザ', 1, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit('未定義', '鍵');
\set VERBOSITY default
SELECT * FROM rate_limiter.rate_limit('送信', 'ユーザー', throws => true);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
DO $$
DECLARE
    detail text;
BEGIN
    PERFORM * FROM rate_limiter.rate_limit('送信', 'ユーザー', throws => true);
EXCEPTION WHEN SQLSTATE 'RL429' THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RAISE NOTICE 'name %, key %', detail::jsonb->>'name', detail::jsonb->>'key';
END
$$;
SELECT rate_limiter.http_headers('送信', 'ユーザー');
-- A character of EUC_JP with no Unicode equivalent (0xA9A1) in a name.
SELECT ok FROM rate_limiter.rate_limit('名' || convert_from('\xa9a1', 'EUC_JP'), config => rate_limiter.token_bucket(1, '1 hour'));

-- WIN1252: five bytes (0x81, 0x8D, 0x8F, 0x90, 0x9D) are characters of
-- the encoding with no Unicode equivalent. Limits named with them work.
-- (How statistics show all these names: encodings_stats.sql.)
CREATE DATABASE rl_win1252 ENCODING 'WIN1252' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c rl_win1252
CREATE EXTENSION rate_limiter;
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('w' || chr(129) || chr(233), config => rate_limiter.token_bucket(2, '1 hour'));
SELECT ok, remaining FROM rate_limiter.rate_limit('w' || chr(144), config => rate_limiter.token_bucket(2, '1 hour'));

\c :regression_database
DROP DATABASE rl_latin1;
DROP DATABASE rl_sql_ascii;
DROP DATABASE rl_euc_jp;
DROP DATABASE rl_win1252;
