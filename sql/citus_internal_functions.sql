-- Citus (docs/guarantees.md, "Citus"): the internal functions that run a
-- call on the node holding its row (src/citus/internal_functions.rs), one
-- overload per type of distribution column (text, bigint, integer, uuid).
-- docs/citus-design.md says why each step is as it is.

CREATE FUNCTION rate_limiter._rate_limit_at(
    dkey    text,
    name    text,
    key     text,
    count   float8,
    reserve boolean,
    config  rate_limiter.config,
    consume boolean,
    now_override timestamptz,
    own_transaction boolean DEFAULT false)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2,
               reserved boolean, near_limit boolean, contended boolean)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', '_rate_limit_at_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_at(text, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) IS
'Internal (Citus): rate_limit (consume => true) or rate_check on the node that holds the row of dkey, which Citus delegates the call to. '
'now_override: the calling node''s rate_limiter.now_override, used as the clock for this call (a superuser''s only: 42501 otherwise); NULL = this node''s clock. '
'own_transaction: the caller''s call is its transaction''s only work, so it may commit here as a statement of its own (default false). '
'Errors: 55000 when the row is not on this node, or a consuming call is outside a transaction block without own_transaction (a global limit with several shards: even with it).';

CREATE FUNCTION rate_limiter._rate_limit_at(
    dkey    bigint,
    name    text,
    key     text,
    count   float8,
    reserve boolean,
    config  rate_limiter.config,
    consume boolean,
    now_override timestamptz,
    own_transaction boolean DEFAULT false)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2,
               reserved boolean, near_limit boolean, contended boolean)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', '_rate_limit_at_bigint_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_at(bigint, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) IS
'Internal (Citus): _rate_limit_at for a state table colocated with a table distributed by a bigint column (dkey: the key as a bigint). '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer.';

CREATE FUNCTION rate_limiter._rate_limit_at(
    dkey    uuid,
    name    text,
    key     text,
    count   float8,
    reserve boolean,
    config  rate_limiter.config,
    consume boolean,
    now_override timestamptz,
    own_transaction boolean DEFAULT false)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2,
               reserved boolean, near_limit boolean, contended boolean)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', '_rate_limit_at_uuid_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_at(uuid, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) IS
'Internal (Citus): _rate_limit_at for a state table colocated with a table distributed by a uuid column. '
'Errors: as the text overload''s; 22P02 a key that is not a uuid.';

CREATE FUNCTION rate_limiter._rate_limit_at(
    dkey    integer,
    name    text,
    key     text,
    count   float8,
    reserve boolean,
    config  rate_limiter.config,
    consume boolean,
    now_override timestamptz,
    own_transaction boolean DEFAULT false)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2,
               reserved boolean, near_limit boolean, contended boolean)
LANGUAGE c VOLATILE ROWS 1
AS 'MODULE_PATHNAME', '_rate_limit_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_at(integer, text, text, float8, boolean, rate_limiter.config, boolean, timestamptz, boolean) IS
'Internal (Citus): _rate_limit_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._rate_state_at(
    dkey   text,
    name   text,
    key    text,
    shards int2)
RETURNS TABLE (shard int2, value float8, ts timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_state_at_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_state_at(text, text, text, int2) IS
'Internal (Citus): the stored state rows of (name, key), shards 0 to shards - 1, read without locking on the node that holds them, which Citus delegates the call to (status and http_headers); '
'a sliding window''s row whose previous window admitted something comes with a second row, shard -1 - shard, whose value is that count. '
'Errors: 55000 when the rows are not on this node.';

CREATE FUNCTION rate_limiter._rate_state_at(
    dkey   bigint,
    name   text,
    key    text,
    shards int2)
RETURNS TABLE (shard int2, value float8, ts timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_state_at_bigint_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_state_at(bigint, text, text, int2) IS
'Internal (Citus): _rate_state_at for a state table colocated with a table distributed by a bigint column. '
'Errors: 55000 when the rows are not on this node; 22P02 a key that is not a decimal integer.';

CREATE FUNCTION rate_limiter._rate_state_at(
    dkey   uuid,
    name   text,
    key    text,
    shards int2)
RETURNS TABLE (shard int2, value float8, ts timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_state_at_uuid_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_state_at(uuid, text, text, int2) IS
'Internal (Citus): _rate_state_at for a state table colocated with a table distributed by a uuid column. '
'Errors: as the text overload''s; 22P02 a key that is not a uuid.';

CREATE FUNCTION rate_limiter._rate_state_at(
    dkey   integer,
    name   text,
    key    text,
    shards int2)
RETURNS TABLE (shard int2, value float8, ts timestamptz)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_state_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_state_at(integer, text, text, int2) IS
'Internal (Citus): _rate_state_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._rate_credit_at(
    dkey   text,
    name   text,
    key    text,
    count  float8,
    config rate_limiter.config,
    now_override timestamptz)
RETURNS float8
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_credit_at_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_credit_at(text, text, text, float8, rate_limiter.config, timestamptz) IS
'Internal (Citus): rate_credit on the node that holds the rows of dkey, which Citus delegates the call to; the value afterwards. '
'now_override: the calling node''s rate_limiter.now_override, used as the clock for this call (a superuser''s only: 42501 otherwise); NULL = this node''s clock. '
'Errors: 55000 when the rows are not on this node or the call is outside a transaction block; those of rate_credit.';

CREATE FUNCTION rate_limiter._rate_credit_at(
    dkey   bigint,
    name   text,
    key    text,
    count  float8,
    config rate_limiter.config,
    now_override timestamptz)
RETURNS float8
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_credit_at_bigint_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_credit_at(bigint, text, text, float8, rate_limiter.config, timestamptz) IS
'Internal (Citus): _rate_credit_at for a state table colocated with a table distributed by a bigint column. '
'Errors: 55000 when the rows are not on this node or the call is outside a transaction block; 22P02 a key that is not a decimal integer; those of rate_credit.';

CREATE FUNCTION rate_limiter._rate_credit_at(
    dkey   uuid,
    name   text,
    key    text,
    count  float8,
    config rate_limiter.config,
    now_override timestamptz)
RETURNS float8
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_credit_at_uuid_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_credit_at(uuid, text, text, float8, rate_limiter.config, timestamptz) IS
'Internal (Citus): _rate_credit_at for a state table colocated with a table distributed by a uuid column. '
'Errors: as the text overload''s; 22P02 a key that is not a uuid.';

CREATE FUNCTION rate_limiter._rate_credit_at(
    dkey   integer,
    name   text,
    key    text,
    count  float8,
    config rate_limiter.config,
    now_override timestamptz)
RETURNS float8
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_credit_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_credit_at(integer, text, text, float8, rate_limiter.config, timestamptz) IS
'Internal (Citus): _rate_credit_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._rate_limit_all_at(
    dkey     text,
    requests rate_limiter.request[],
    reserve  boolean,
    now_override timestamptz)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2, contended boolean)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_limit_all_at_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_all_at(text, rate_limiter.request[], boolean, timestamptz) IS
'Internal (Citus): rate_limit_all for requests whose rows are all on the node that holds the row of dkey (the first request''s), which Citus delegates the call to; one row per request. '
'now_override: the calling node''s rate_limiter.now_override, used as the clock for this call (a superuser''s only: 42501 otherwise); NULL = this node''s clock. '
'Errors: 55000 when a row is not on this node or the call is outside a transaction block; 22023 dkey is not the first request''s; those of rate_limit_all.';

CREATE FUNCTION rate_limiter._rate_limit_all_at(
    dkey     bigint,
    requests rate_limiter.request[],
    reserve  boolean,
    now_override timestamptz)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2, contended boolean)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_limit_all_at_bigint_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_all_at(bigint, rate_limiter.request[], boolean, timestamptz) IS
'Internal (Citus): _rate_limit_all_at for a state table colocated with a table distributed by a bigint column. '
'Errors: 55000 when a row is not on this node or the call is outside a transaction block; 22023 dkey is not the first request''s; 22P02 a key that is not a decimal integer; those of rate_limit_all.';

CREATE FUNCTION rate_limiter._rate_limit_all_at(
    dkey     uuid,
    requests rate_limiter.request[],
    reserve  boolean,
    now_override timestamptz)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2, contended boolean)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_limit_all_at_uuid_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_all_at(uuid, rate_limiter.request[], boolean, timestamptz) IS
'Internal (Citus): _rate_limit_all_at for a state table colocated with a table distributed by a uuid column. '
'Errors: as the text overload''s; 22P02 a key that is not a uuid.';

CREATE FUNCTION rate_limiter._rate_limit_all_at(
    dkey     integer,
    requests rate_limiter.request[],
    reserve  boolean,
    now_override timestamptz)
RETURNS TABLE (ok boolean, retry_after bigint, remaining float8, verdict int2, contended boolean)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_limit_all_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_limit_all_at(integer, rate_limiter.request[], boolean, timestamptz) IS
'Internal (Citus): _rate_limit_all_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';

CREATE FUNCTION rate_limiter._prune_at(
    dkey         text,
    older_than   interval,
    now_override timestamptz)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_prune_at_wrapper';

COMMENT ON FUNCTION rate_limiter._prune_at(text, interval, timestamptz) IS
'Internal (Citus): prune(older_than) of the shards placed on the node that holds the shard of dkey, which Citus delegates the call to; how many rows it deleted. prune() on any node reaches every other node through it. '
'now_override: the calling node''s rate_limiter.now_override, used as the clock (a superuser''s only: 42501 otherwise); NULL = this node''s clock. '
'Errors: 55000 when the shard of dkey is not on this node or the call is outside a transaction block; 42501 for a role that may not call rate_limiter.prune(); those of prune.';

CREATE FUNCTION rate_limiter._prune_at(
    dkey         bigint,
    older_than   interval,
    now_override timestamptz)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_prune_at_bigint_wrapper';

COMMENT ON FUNCTION rate_limiter._prune_at(bigint, interval, timestamptz) IS
'Internal (Citus): _prune_at for a state table colocated with a table distributed by a bigint column. '
'Errors: as the text overload''s.';

CREATE FUNCTION rate_limiter._prune_at(
    dkey         uuid,
    older_than   interval,
    now_override timestamptz)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_prune_at_uuid_wrapper';

COMMENT ON FUNCTION rate_limiter._prune_at(uuid, interval, timestamptz) IS
'Internal (Citus): _prune_at for a state table colocated with a table distributed by a uuid column. '
'Errors: as the text overload''s.';

CREATE FUNCTION rate_limiter._prune_at(
    dkey         integer,
    older_than   interval,
    now_override timestamptz)
RETURNS bigint
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_prune_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._prune_at(integer, interval, timestamptz) IS
'Internal (Citus): _prune_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s.';

CREATE FUNCTION rate_limiter._rate_block_at(
    dkey text,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(text, text, text) IS
'Internal (Citus): the block of (name, key), read on the node that holds its rows (beside its state), which Citus delegates the call to (status, http_headers, blocked and the refusal''s DETAIL, as the calling role). No row when the key has none. '
'Errors: 55000 when the rows are not on this node; 22023 a dkey that is not (name, key)''s.';

CREATE FUNCTION rate_limiter._rate_block_at(
    dkey bigint,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_bigint_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(bigint, text, text) IS
'Internal (Citus): _rate_block_at for a state table colocated with a table distributed by a bigint column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer.';

CREATE FUNCTION rate_limiter._rate_block_at(
    dkey uuid,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_uuid_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(uuid, text, text) IS
'Internal (Citus): _rate_block_at for a state table colocated with a table distributed by a uuid column. '
'Errors: as the text overload''s; 22P02 a key that is not a uuid.';

CREATE FUNCTION rate_limiter._rate_block_at(
    dkey integer,
    name text,
    key  text)
RETURNS TABLE (until timestamptz, strikes int4, reason text)
LANGUAGE c VOLATILE
AS 'MODULE_PATHNAME', '_rate_block_at_integer_wrapper';

COMMENT ON FUNCTION rate_limiter._rate_block_at(integer, text, text) IS
'Internal (Citus): _rate_block_at for a state table colocated with a table distributed by an integer column. '
'Errors: as the text overload''s; 22P02 a key that is not a decimal integer in the range of integer.';
