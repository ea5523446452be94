-- Statistics of names in every database encoding, read by a UTF8 client
-- (as postgres_exporter reads them): the names of encodings.sql. (Apart
-- from encodings.sql because the portable edition has no statistics
-- (docs/guarantees.md, "Portable edition"): its schedule leaves this test
-- out.)
SELECT current_database() AS regression_database \gset
CREATE DATABASE rl_stats_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE rl_stats_sql_ascii ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE rl_stats_euc_jp ENCODING 'EUC_JP' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
CREATE DATABASE rl_stats_win1252 ENCODING 'WIN1252' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;

\c rl_stats_latin1
\i tests/pg_regress/sql/include/encoding_corpus.sql
\i tests/pg_regress/sql/include/encoding_stats.sql

\c rl_stats_sql_ascii
\i tests/pg_regress/sql/include/encoding_corpus.sql
\i tests/pg_regress/sql/include/encoding_stats.sql

-- EUC_JP with a UTF8 client: the names converted; a character of EUC_JP
-- with no Unicode equivalent (0xA9A1) shows as \xNN, so the view stays
-- readable by a UTF8 client.
\c rl_stats_euc_jp
\encoding UTF8
CREATE EXTENSION rate_limiter;
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('送信', rate_limiter.token_bucket(2, '1 hour'));
SELECT ok FROM rate_limiter.rate_limit('送信', 'ユーザー');
SELECT ok FROM rate_limiter.rate_limit('送信', 'ユーザー');
SELECT ok FROM rate_limiter.rate_limit('送信', 'ユーザー');
SELECT name, calls, admitted, refused FROM rate_limiter.stats ORDER BY name;
SELECT ok FROM rate_limiter.rate_limit('名' || convert_from('\xa9a1', 'EUC_JP'), config => rate_limiter.token_bucket(1, '1 hour'));
SELECT name, calls FROM rate_limiter.stats WHERE name LIKE '名%';
SELECT rate_limiter.stats_reset('名\xa9\xa1');
SELECT name, calls FROM rate_limiter.stats WHERE name LIKE '名%';

-- WIN1252: the five bytes with no Unicode equivalent show as \xNN.
\c rl_stats_win1252
CREATE EXTENSION rate_limiter;
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT ok FROM rate_limiter.rate_limit('w' || chr(129) || chr(233), config => rate_limiter.token_bucket(2, '1 hour'));
SELECT ok FROM rate_limiter.rate_limit('w' || chr(144), config => rate_limiter.token_bucket(2, '1 hour'));
\encoding UTF8
SELECT name, calls FROM rate_limiter.stats ORDER BY name COLLATE "C";
SELECT rate_limiter.stats_reset('w\x81é');
SELECT name, calls FROM rate_limiter.stats ORDER BY name COLLATE "C";

\c :regression_database
DROP DATABASE rl_stats_latin1;
DROP DATABASE rl_stats_sql_ascii;
DROP DATABASE rl_stats_euc_jp;
DROP DATABASE rl_stats_win1252;
