-- What statistics counted of shadow.sql's calls (the test before this
-- one; the server preloads the library): its shadow refusals are
-- shadow_refused. (Apart from shadow.sql because the portable edition has
-- no statistics (docs/guarantees.md, "Portable edition"): its schedule
-- leaves this out.)
SELECT name, calls, admitted, refused, reserved, tokens, near_limit, shadow_refused
FROM rate_limiter.stats WHERE name LIKE 'shadow%' ORDER BY name;

-- Statistics count a sliding or calendar window's calls as any other
-- kind's (sliding_window.sql's and calendar_window.sql's calls, which ran
-- before this test): refusals as refused, a shadow refusal as
-- shadow_refused, a reservation as reserved, a block's refusals as
-- blocked.
SELECT name, calls, admitted, refused, reserved, tokens, shadow_refused, blocked
FROM rate_limiter.stats
WHERE name IN ('sliding', 'sliding_shadow', 'sharded_reserve', 'sliding_block', 'monthly', 'carry', 'calendar_shadow')
ORDER BY name;

-- A key in shadow mode by its override (docs/overrides.md): its refusal
-- is counted as shadow_refused, another key's as refused, both under the
-- limit's name.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('shadow_override', rate_limiter.token_bucket(1, '1 hour'));
SELECT rate_limiter.override('shadow_override', 'watched',
    config => rate_limiter.token_bucket(1, '1 hour'), enforce => false);
SELECT ok FROM rate_limiter.rate_limit('shadow_override', 'watched', 1);
SELECT ok FROM rate_limiter.rate_limit('shadow_override', 'watched', 1);
SELECT ok FROM rate_limiter.rate_limit('shadow_override', 'enforced', 1);
SELECT ok FROM rate_limiter.rate_limit('shadow_override', 'enforced', 1);
SELECT name, calls, admitted, refused, shadow_refused
FROM rate_limiter.stats WHERE name = 'shadow_override';
SELECT rate_limiter.undefine('shadow_override');
SELECT rate_limiter.rate_reset('shadow_override', k) FROM (VALUES ('watched'), ('enforced')) AS keys(k);
RESET rate_limiter.now_override;

-- A blocked key's refusal (docs/blocks.md) counts as refused and as
-- blocked; in shadow mode as shadow_refused, not blocked; a refusal for
-- want of tokens is not blocked.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('blocked_stats', rate_limiter.token_bucket(1, '1 hour'));
SELECT rate_limiter.define('blocked_shadow_stats', rate_limiter.token_bucket(1, '1 hour'), enforce => false);
SELECT rate_limiter.block('blocked_stats', 'b', '1 minute'), rate_limiter.block('blocked_shadow_stats', 'b', '1 minute');
SELECT ok FROM rate_limiter.rate_limit('blocked_stats', 'b');
SELECT ok FROM rate_limiter.rate_limit('blocked_stats', 'b');
SELECT ok FROM rate_limiter.rate_limit('blocked_stats', 'a');
SELECT ok FROM rate_limiter.rate_limit('blocked_stats', 'a');
SELECT ok FROM rate_limiter.rate_check('blocked_stats', 'b');
SELECT ok FROM rate_limiter.rate_limit_all(ARRAY[ROW('blocked_stats', 'b', 1, NULL)]::rate_limiter.request[]);
SELECT ok FROM rate_limiter.rate_wait('blocked_stats', 'b', 1, '0 seconds');
SELECT ok FROM rate_limiter.rate_limit('blocked_shadow_stats', 'b');
SELECT name, calls, admitted, refused, shadow_refused, blocked
FROM rate_limiter.stats WHERE name LIKE 'blocked%' ORDER BY name;
SELECT rate_limiter.undefine('blocked_stats'), rate_limiter.undefine('blocked_shadow_stats');
SELECT rate_limiter.rate_reset('blocked_stats', 'a');
RESET rate_limiter.now_override;

-- A composite (docs/composites.md) is counted under its members' names,
-- as the rate_limit_all it is: an admitted call once per member; a
-- refused one only for the members that refused (the others consumed
-- nothing); in shadow mode those as shadow_refused. rate_wait counts its
-- final answer; rate_credit credits every member.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';
SELECT rate_limiter.define('cstats_a', rate_limiter.token_bucket(2, '1 hour'));
SELECT rate_limiter.define('cstats_b', rate_limiter.token_bucket(5, '1 hour'));
SELECT rate_limiter.define_all('cstats', ARRAY['cstats_a', 'cstats_b']);
SELECT rate_limiter.define_all('cstats_shadow', ARRAY['cstats_a', 'cstats_b'], enforce => false);
SELECT ok FROM rate_limiter.rate_limit('cstats', 'k');
SELECT ok FROM rate_limiter.rate_limit('cstats', 'k');
SELECT ok FROM rate_limiter.rate_limit('cstats', 'k');
SELECT ok FROM rate_limiter.rate_limit('cstats_shadow', 'k');
SELECT ok FROM rate_limiter.rate_wait('cstats', 'k', 1, '0 seconds');
SELECT rate_limiter.rate_credit('cstats', 'k', 1);
SELECT name, calls, admitted, refused, shadow_refused, tokens, credited
FROM rate_limiter.stats WHERE name LIKE 'cstats\_%' ORDER BY name;
SELECT rate_limiter.undefine('cstats'), rate_limiter.undefine('cstats_shadow');
SELECT rate_limiter.undefine('cstats_a'), rate_limiter.undefine('cstats_b');
SELECT rate_limiter.rate_reset('cstats_a', 'k'), rate_limiter.rate_reset('cstats_b', 'k');
RESET rate_limiter.now_override;

-- A concurrency limit (docs/concurrency.md): acquire() counts one call
-- per decision, a slot admitted as one token; release() and renew()
-- count nothing.
SELECT rate_limiter.define('shadow_stats_slots', rate_limiter.concurrency(1));
BEGIN;
SELECT ok FROM rate_limiter.acquire('shadow_stats_slots', 'k');
SELECT ok FROM rate_limiter.acquire('shadow_stats_slots', 'k');
COMMIT;
SELECT rate_limiter.define('shadow_stats_slots', rate_limiter.concurrency(1), enforce => false);
BEGIN;
SELECT ok FROM rate_limiter.acquire('shadow_stats_slots', 'k');
SELECT ok FROM rate_limiter.acquire('shadow_stats_slots', 'k');
COMMIT;
SELECT name, calls, admitted, refused, tokens, shadow_refused FROM rate_limiter.stats WHERE name = 'shadow_stats_slots';
SELECT rate_limiter.undefine('shadow_stats_slots');
