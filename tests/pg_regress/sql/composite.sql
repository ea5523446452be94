-- Composites (docs/composites.md): define_all() names a limit made of
-- defined limits. A call of it consumes the same key and count from every
-- member, all or nothing: ok when every member admits, remaining the
-- least of the members', retry_after the greatest of the refusing
-- members', the refusal naming the member that refused longest.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

-- 10 a second and 20 an hour, on one name.
SELECT rate_limiter.define('comp_second', rate_limiter.token_bucket(10, '1 second'));
SELECT rate_limiter.define('comp_hour', rate_limiter.fixed_window(20, '1 hour', start => '2026-01-01'));
SELECT rate_limiter.define_all('comp_api', ARRAY['comp_second', 'comp_hour']);
SELECT * FROM rate_limiter.composites WHERE name = 'comp_api';

-- 8 of 10 and of 20: remaining the least, 2.
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 8);
SELECT name, key, value, ts FROM rate_limiter.rate_limits WHERE name LIKE 'comp\_%' ORDER BY name;
-- 5 more: the hour has 12, the second only 2 (3 more come in 0.3 s):
-- refused, and nothing consumed from either.
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 5);
SELECT * FROM rate_limiter.rate_check('comp_api', 'k', 5);
SELECT name, key, value, ts FROM rate_limiter.rate_limits WHERE name LIKE 'comp\_%' ORDER BY name;
-- Exactly at retry_after the same call is admitted, not a microsecond
-- before.
SET rate_limiter.now_override = '2026-01-01 00:00:00.299999+00';
SELECT ok FROM rate_limiter.rate_check('comp_api', 'k', 5);
SET rate_limiter.now_override = '2026-01-01 00:00:00.3+00';
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 5);
-- Now the hour has 7 left. A call of 8: the second (full again) would
-- admit it, the hour refuses until 01:00 and names the refusal; remaining
-- is what is left now, the hour's 7.
SET rate_limiter.now_override = '2026-01-01 00:00:10+00';
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 8);
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 8, throws => true);
-- A reservation waits for the member that waits longest.
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 8, reserve => true);
SELECT rate_limiter.rate_reset('comp_api', 'k');
SELECT count(*) FROM rate_limiter.rate_limits WHERE name LIKE 'comp\_%' AND key = 'k';

-- status: the tightest member's row (the fewest tokens now).
SET rate_limiter.now_override = '2026-01-01 00:01:00+00';
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k2', 4);
SELECT * FROM rate_limiter.status('comp_api', 'k2');
SET rate_limiter.now_override = '2026-01-01 00:01:01+00';
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k2', 9);
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k2', 10);
SELECT * FROM rate_limiter.status('comp_api', 'k2');
-- http_headers: one policy per member; Retry-After the call's.
SELECT rate_limiter.http_headers('comp_api', 'k2');
SELECT rate_limiter.http_headers('comp_api', 'k2', false, '00:59:59', 0);
-- rate_credit: to every member; the least value afterwards.
SELECT rate_limiter.rate_credit('comp_api', 'k2', 3);
SELECT name, value FROM rate_limiter.rate_limits WHERE name LIKE 'comp\_%' AND key = 'k2' ORDER BY name;
-- rate_wait: a refusal with no time to wait answers at once.
SELECT * FROM rate_limiter.rate_wait('comp_api', 'k2', 5, timeout => '0 seconds');
SELECT * FROM rate_limiter.rate_wait('comp_api', 'k2', 1, timeout => '0 seconds');
-- The global key.
SELECT * FROM rate_limiter.rate_limit('comp_api', NULL, 3);
SELECT name, key, value FROM rate_limiter.rate_limits WHERE name LIKE 'comp\_%' AND key IS NULL ORDER BY name;
-- More members than rate_limiter.max_requests: 54000 on a key too (where
-- the call could otherwise be decided as its members' single calls are).
SET rate_limiter.max_requests = 1;
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k3');
RESET rate_limiter.max_requests;

-- A member in shadow mode does not refuse (as in rate_limit_all); a
-- composite in shadow mode answers a refusal as admitted and consumes
-- nothing.
SELECT rate_limiter.define('comp_tiny', rate_limiter.token_bucket(1, '1 hour'));
SELECT rate_limiter.define_all('comp_shadow', ARRAY['comp_second', 'comp_tiny'], enforce => false);
SELECT * FROM rate_limiter.rate_limit('comp_shadow', 's', 1);
SELECT * FROM rate_limiter.rate_limit('comp_shadow', 's', 1);
SELECT * FROM rate_limiter.rate_limit('comp_shadow', 's', 1, throws => true);
SELECT * FROM rate_limiter.rate_check('comp_shadow', 's', 1);
SELECT name, value FROM rate_limiter.rate_limits WHERE key = 's' ORDER BY name;
-- define_all again replaces the members and enforce.
SELECT rate_limiter.define_all('comp_shadow', ARRAY['comp_tiny']);
SELECT * FROM rate_limiter.rate_limit('comp_shadow', 's', 1);

-- A blocked member refuses the composite, and its reason is in the DETAIL.
SELECT rate_limiter.block('comp_hour', 'bad', '10 minutes', 'abuse');
SELECT * FROM rate_limiter.rate_limit('comp_api', 'bad', 1);
SELECT * FROM rate_limiter.rate_limit('comp_api', 'bad', 1, throws => true);
SELECT rate_limiter.unblock('comp_hour', 'bad');

-- guard and postgrest_limit take the composite's name.
CREATE TABLE comp_posts (author text, body text);
CREATE TRIGGER comp_posts_limit BEFORE INSERT ON comp_posts
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('comp_api', 'author');
INSERT INTO comp_posts SELECT 'ann', 'post ' || n FROM generate_series(1, 10) AS n;
INSERT INTO comp_posts VALUES ('ann', 'one too many');
SELECT count(*) FROM comp_posts;
DROP TABLE comp_posts;
BEGIN;
SELECT rate_limiter.postgrest_limit('comp_api', 'bob', 2);
SELECT current_setting('response.headers');
COMMIT;
SELECT rate_limiter.postgrest_limit('comp_api', 'bob', 9);

-- A count a member could never admit: 22023, as rate_limit_all says it.
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k3', 15);
-- rate_limit_all names defined limits, not composites.
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[ROW('comp_api', 'k', 1, NULL)::rate_limiter.request]);
-- (An earlier request of an undefined name is its 42704 first.)
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[ROW('comp_nope', 'k', 1, NULL)::rate_limiter.request,
                                                ROW('comp_api', 'k', 1, NULL)::rate_limiter.request]);
-- An inline config makes the name an inline limit (whoever may define).
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k4', 1, config => rate_limiter.token_bucket(1, '1 second'));
SELECT rate_limiter.rate_reset('comp_api', 'k4');
-- In a read-only transaction: 25006.
BEGIN READ ONLY;
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 1);
ROLLBACK;

-- What define_all refuses.
SELECT rate_limiter.define_all(NULL, ARRAY['comp_second']);
SELECT rate_limiter.define_all('comp_x', NULL);
SELECT rate_limiter.define_all('comp_x', ARRAY['comp_second'], NULL);
SELECT rate_limiter.define_all('comp_x', ARRAY[]::text[]);
SELECT rate_limiter.define_all('comp_x', ARRAY[['comp_second'], ['comp_hour']]);
SELECT rate_limiter.define_all('comp_x', ARRAY['comp_second', NULL]);
SELECT rate_limiter.define_all('comp_x', ARRAY['comp_second', 'comp_second']);
SELECT rate_limiter.define_all('comp_x', ARRAY['comp_x']);
SELECT rate_limiter.define_all('comp_x', ARRAY['comp_missing']);
SELECT rate_limiter.define_all('comp_x', ARRAY['comp_api']);
SELECT rate_limiter.define_all('comp_second', ARRAY['comp_hour']);
BEGIN READ ONLY;
SELECT rate_limiter.define_all('comp_x', ARRAY['comp_second']);
ROLLBACK;
-- One namespace: define() of a composite's name.
SELECT rate_limiter.define('comp_api', rate_limiter.token_bucket(1, '1 second'));

-- undefine: a member is kept while a composite names it (2BP01); the
-- composite goes first, then its members may.
SELECT rate_limiter.undefine('comp_hour');
SELECT rate_limiter.undefine('comp_api');
SELECT rate_limiter.undefine('comp_api');
SELECT * FROM rate_limiter.rate_limit('comp_api', 'k', 1);
SELECT rate_limiter.undefine('comp_hour');
SELECT rate_limiter.undefine('comp_shadow');
SELECT rate_limiter.undefine('comp_second');
SELECT rate_limiter.undefine('comp_tiny');
SELECT count(*) FROM rate_limiter.composites;
RESET rate_limiter.now_override;
