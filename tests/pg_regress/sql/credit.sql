-- rate_credit(): giving tokens back. "Reserve an estimate, settle the
-- actual cost": reserve 1,000 LLM tokens, use 612, credit 388.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

SELECT rate_limiter.define('credit_llm', rate_limiter.token_bucket(1000, '1 minute', max_reserved => 1000));
-- A limit without state is full: crediting it writes nothing.
SELECT rate_limiter.rate_credit('credit_llm', 'org');
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'credit_llm';

-- The settle flow, in one transaction with the work: reserve the
-- estimate, do the work, give back what it did not use.
BEGIN;
SELECT ok, retry_after, remaining FROM rate_limiter.rate_limit('credit_llm', 'org', 1000, reserve => true);
-- ... the LLM call used 612 tokens ...
SELECT rate_limiter.rate_credit('credit_llm', 'org', 1000 - 612);
COMMIT;
SELECT value FROM rate_limiter.rate_limits WHERE name = 'credit_llm' AND key = 'org';

-- A debt is paid down; a credit never exceeds the capacity (it refills to
-- now first: 6 s later 100 tokens have arrived).
SELECT ok, remaining FROM rate_limiter.rate_limit('credit_llm', 'org', 1200, reserve => true);
SELECT rate_limiter.rate_credit('credit_llm', 'org', 300);
SET rate_limiter.now_override = '2026-01-01 00:00:06+00';
SELECT rate_limiter.rate_credit('credit_llm', 'org', 5000);
SELECT * FROM rate_limiter.rate_check('credit_llm', 'org', 0);

-- Rolled back with its transaction, like a consumption.
BEGIN;
SELECT ok, remaining FROM rate_limiter.rate_limit('credit_llm', 'org', 500);
ROLLBACK;
BEGIN;
SELECT ok, remaining FROM rate_limiter.rate_limit('credit_llm', 'org', 500);
SELECT rate_limiter.rate_credit('credit_llm', 'org', 200);
ROLLBACK;
SELECT value FROM rate_limiter.rate_limits WHERE name = 'credit_llm' AND key = 'org';

-- A sharded limit: the emptiest shards first, each up to its capacity
-- (4 shards of 250).
SET rate_limiter.random_seed = 5;
\set sharded 'rate_limiter.token_bucket(1000, ''1 minute'', shards => 4)'
SELECT ok FROM rate_limiter.rate_limit('credit_sharded', count => 400, config => :sharded);
SELECT ok FROM rate_limiter.rate_limit('credit_sharded', count => 100, config => :sharded);
SELECT shard, value FROM rate_limiter.rate_limits WHERE name = 'credit_sharded' ORDER BY shard;
SELECT rate_limiter.rate_credit('credit_sharded', count => 300, config => :sharded);
SELECT shard, value FROM rate_limiter.rate_limits WHERE name = 'credit_sharded' ORDER BY shard;

-- Errors: NULL name or count (22004), a bad count (22023), an unknown
-- limit (42704), a read-only transaction (25006).
SELECT rate_limiter.rate_credit(NULL);
SELECT rate_limiter.rate_credit('credit_llm', 'org', NULL);
SELECT rate_limiter.rate_credit('credit_llm', 'org', -1);
SELECT rate_limiter.rate_credit('credit_llm', 'org', 'NaN');
SELECT rate_limiter.rate_credit('no such limit');
BEGIN READ ONLY;
SELECT rate_limiter.rate_credit('credit_llm', 'org', 1);
ROLLBACK;

SELECT rate_limiter.rate_reset('credit_llm', 'org'), rate_limiter.rate_reset('credit_sharded'),
       rate_limiter.undefine('credit_llm');
