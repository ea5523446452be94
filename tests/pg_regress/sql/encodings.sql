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

\c :regression_database
DROP DATABASE rl_latin1;
DROP DATABASE rl_sql_ascii;
