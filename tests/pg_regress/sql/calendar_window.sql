-- Calendar window (docs/shapes.md): rate tokens at the start of each
-- calendar minute, hour, day, week, month, quarter or year in a time
-- zone; tokens not used carry over up to capacity. A month is a month, and
-- a day around a change of daylight saving time has 23 or 25 hours.
SET timezone = 'UTC';
SET datestyle = 'ISO';
SET intervalstyle = 'postgres';

-- 1,000 per calendar month, New York time. The period is the unit.
SELECT rate_limiter.define('monthly', rate_limiter.calendar_window(1000, 'month', 'America/New_York'));
SELECT kind, rate, period, capacity, shards, start, time_zone FROM rate_limiter.definitions WHERE name = 'monthly';

-- Used up at 2026-01-31 23:59 New York time: the next token comes with
-- February, 60 s later. The row's ts is January's start (05:00 UTC).
SET rate_limiter.now_override = '2026-01-31 23:59:00-05';
SELECT * FROM rate_limiter.rate_limit('monthly', 'k', 1000);
SELECT * FROM rate_limiter.rate_limit('monthly', 'k', 1);
SELECT value, ts FROM rate_limiter.rate_limits WHERE name = 'monthly';
-- Exactly then it succeeds, and not a microsecond before.
SET rate_limiter.now_override = '2026-01-31 23:59:59.999999-05';
SELECT ok FROM rate_limiter.rate_check('monthly', 'k', 1);
SET rate_limiter.now_override = '2026-02-01 00:00:00-05';
SELECT * FROM rate_limiter.rate_limit('monthly', 'k', 1);
-- status: full again when March starts; http_headers' window is the
-- current month (February 2026: 672 hours).
SELECT * FROM rate_limiter.status('monthly', 'k');
SELECT rate_limiter.http_headers('monthly', 'k');
-- March 2026 in New York is 743 hours long (clocks go forward on the 8th).
SET rate_limiter.now_override = '2026-03-15 12:00:00-04';
SELECT rate_limiter.http_headers('monthly', 'k');
-- A refusal raised (throws): RL429 with the JSON DETAIL; rate_wait with no
-- time to wait answers at once.
SELECT * FROM rate_limiter.rate_limit('monthly', 'k', 1000);
SELECT * FROM rate_limiter.rate_limit('monthly', 'k', 1, throws => true);
SELECT * FROM rate_limiter.rate_wait('monthly', 'k', 1, timeout => '0 seconds');

-- Days around the changes of daylight saving time: 23 and 25 hours.
SELECT rate_limiter.define('daily', rate_limiter.calendar_window(2, 'day', 'America/New_York'));
SET rate_limiter.now_override = '2026-03-08 12:00:00-04';
SELECT ok, remaining FROM rate_limiter.rate_limit('daily', 'k', 2);
SELECT ok, retry_after FROM rate_limiter.rate_limit('daily', 'k', 1);
SELECT rate_limiter.http_headers('daily', 'k');
SET rate_limiter.now_override = '2026-11-01 12:00:00-05';
SELECT rate_limiter.http_headers('daily', 'k');

-- Hours: when clocks go back, the hour 01:00 - 02:00 comes twice and is
-- two windows; the first ends at 01:00 EST, an hour later.
SELECT rate_limiter.define('hourly', rate_limiter.calendar_window(1, 'hour', 'America/New_York'));
SET rate_limiter.now_override = '2026-11-01 01:30:00-04';
SELECT ok FROM rate_limiter.rate_limit('hourly', 'k');
SELECT ok, retry_after FROM rate_limiter.rate_limit('hourly', 'k');
SET rate_limiter.now_override = '2026-11-01 01:10:00-05';
SELECT ok FROM rate_limiter.rate_limit('hourly', 'k');
SELECT ts FROM rate_limiter.rate_limits WHERE name = 'hourly';
-- A zone half an hour off UTC: hours start at :30 UTC (at 06:10 UTC the
-- next starts at 06:30).
SELECT ok FROM rate_limiter.rate_limit('ist', 'k', config => rate_limiter.calendar_window(1, 'hour', 'Asia/Kolkata'));
SELECT ok, retry_after FROM rate_limiter.rate_check('ist', 'k', config => rate_limiter.calendar_window(1, 'hour', 'Asia/Kolkata'));

-- Weeks start on Monday (from Wednesday 2026-04-15 10:00 UTC: Monday the
-- 20th); quarters and years where the calendar says.
SET rate_limiter.now_override = '2026-04-15 10:00:00+00';
SELECT ok FROM rate_limiter.rate_limit('weekly', 'k', config => rate_limiter.calendar_window(1, 'week'));
SELECT ok, retry_after FROM rate_limiter.rate_check('weekly', 'k', config => rate_limiter.calendar_window(1, 'week'));
SELECT ok FROM rate_limiter.rate_limit('quarterly', 'k', 2, config => rate_limiter.calendar_window(1, 'quarter', capacity => 2));
SELECT ok, retry_after FROM rate_limiter.rate_check('quarterly', 'k', 2,
    config => rate_limiter.calendar_window(1, 'quarter', capacity => 2));
SELECT * FROM rate_limiter.rate_limit('yearly', 'k', 5, config => rate_limiter.calendar_window(5, 'Year', 'Europe/Berlin'));
SELECT * FROM rate_limiter.rate_check('yearly', 'k', 1, config => rate_limiter.calendar_window(5, 'Year', 'Europe/Berlin'));

-- Carry-over: 10 a day up to 25. Three unused days later, 25 are there.
SELECT rate_limiter.define('carry', rate_limiter.calendar_window(10, 'day', capacity => 25));
SET rate_limiter.now_override = '2026-01-01 08:00:00+00';
SELECT ok, remaining FROM rate_limiter.rate_limit('carry', 'k', 25);
SET rate_limiter.now_override = '2026-01-04 08:00:00+00';
SELECT ok, remaining FROM rate_limiter.rate_check('carry', 'k', 25);
-- Reservations go into debt; the work runs at the start of the window
-- that pays it back (a debt of 15 from 0: two days on).
SELECT ok, remaining FROM rate_limiter.rate_limit('carry', 'k', 25);
SELECT * FROM rate_limiter.rate_limit('carry', 'k', 15, reserve => true);
SELECT * FROM rate_limiter.status('carry', 'k');
-- Credit gives back, up to capacity (it answers the tokens now).
SELECT rate_limiter.rate_credit('carry', 'k', 100);
SELECT value FROM rate_limiter.rate_limits WHERE name = 'carry';

-- rate_limit_all with a token bucket: all or nothing.
SELECT rate_limiter.define('bucket', rate_limiter.token_bucket(100, '1 minute'));
SELECT rate_limiter.define('small', rate_limiter.calendar_window(5, 'day', 'Europe/Berlin'));
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('small', 'all', 3, NULL), ('bucket', 'all', 3, NULL)]::rate_limiter.request[]);
SELECT * FROM rate_limiter.rate_limit_all(ARRAY[('small', 'all', 3, NULL), ('bucket', 'all', 3, NULL)]::rate_limiter.request[]);
SELECT name, value FROM rate_limiter.rate_limits WHERE key = 'all' ORDER BY name;

-- Shadow mode: a refusal answers admitted and writes nothing.
SELECT rate_limiter.define('calendar_shadow', rate_limiter.calendar_window(1, 'day'), enforce => false);
SELECT * FROM rate_limiter.rate_limit('calendar_shadow', 'k');
SELECT * FROM rate_limiter.rate_limit('calendar_shadow', 'k');
SELECT value FROM rate_limiter.rate_limits WHERE name = 'calendar_shadow';

-- A key's override may be a calendar window of another zone.
SELECT rate_limiter.override('daily', 'tokyo', config => rate_limiter.calendar_window(3, 'day', 'Asia/Tokyo'));
SELECT * FROM rate_limiter.status('daily', 'tokyo');
SELECT time_zone FROM rate_limiter.overrides WHERE name = 'daily';

-- Automatic blocks: the call that uses the day up blocks the key.
SELECT rate_limiter.define('calendar_block',
    rate_limiter.with_block(rate_limiter.calendar_window(1, 'day'), block_for => '1 hour'));
SELECT ok FROM rate_limiter.rate_limit('calendar_block', 'k');
SELECT until FROM rate_limiter.blocked('calendar_block', 'k');

-- prune() deletes a row once it changes no answer: full again, in the
-- window a missing row would start.
SET rate_limiter.now_override = '2026-01-04 23:59:59+00';
SELECT rate_limiter.prune();
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'calendar_shadow';
SET rate_limiter.now_override = '2026-01-05 00:00:00+00';
SELECT rate_limiter.prune() > 0 AS pruned;
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'calendar_shadow';

-- Redefining with the same kind and unit keeps the state; another unit
-- discards it.
SELECT ok, remaining FROM rate_limiter.rate_limit('small', 'redefined', 4);
SELECT rate_limiter.define('small', rate_limiter.calendar_window(8, 'day', 'Europe/Berlin'));
SELECT ok, remaining FROM rate_limiter.rate_check('small', 'redefined', 1);
SELECT rate_limiter.define('small', rate_limiter.calendar_window(8, 'hour', 'Europe/Berlin'));
SELECT count(*) FROM rate_limiter.rate_limits WHERE name = 'small' AND key = 'redefined';

-- The constructor: units and zones as PostgreSQL names them (any case);
-- an abbreviation is a fixed offset all year.
SELECT rate_limiter.calendar_window(10, 'minute');
SELECT rate_limiter.calendar_window(10, 'WEEK', 'america/new_york', capacity => 20, max_reserved => 5);
SELECT rate_limiter.calendar_window(10, 'day', 'PST');
SELECT rate_limiter.calendar_window(10, 'fortnight');
SELECT rate_limiter.calendar_window(10, 'day', 'Mars/Olympus_Mons');
SELECT rate_limiter.calendar_window(NULL, 'day');
SELECT rate_limiter.calendar_window(10, NULL);
SELECT rate_limiter.calendar_window(10, 'day', NULL);
SELECT rate_limiter.calendar_window(0, 'day');
SELECT rate_limiter.calendar_window(10, 'day', capacity => -1);
-- A config built by hand: the period must be a unit's, no shards, no
-- start, and time_zone only for a calendar window.
SELECT rate_limiter.rate_check('c', config => ROW('calendar window', 10, '2 days', NULL, NULL, 1, NULL, NULL, NULL,
                                                  NULL, 'UTC')::rate_limiter.config);
SELECT rate_limiter.rate_check('c', config => ROW('calendar window', 10, '1 day', NULL, NULL, 2, NULL, NULL, NULL,
                                                  NULL, 'UTC')::rate_limiter.config);
SELECT rate_limiter.rate_check('c', config => ROW('calendar window', 10, '1 day', NULL, NULL, 1, '2026-01-01', NULL,
                                                  NULL, NULL, 'UTC')::rate_limiter.config);
SELECT rate_limiter.rate_check('c', config => ROW('calendar window', 10, '1 day', NULL, NULL, 1, NULL, NULL, NULL,
                                                  NULL, NULL)::rate_limiter.config);
SELECT rate_limiter.rate_check('c', config => ROW('fixed window', 10, '1 day', NULL, NULL, 1, NULL, NULL, NULL,
                                                  NULL, 'UTC')::rate_limiter.config);
SELECT rate_limiter.rate_check('c', config => ROW('calendar window', 10, '24 hours', NULL, NULL, 1, NULL, NULL, NULL,
                                                  NULL, 'Nowhere/City')::rate_limiter.config);

SELECT rate_limiter.undefine(name) FROM rate_limiter.definitions ORDER BY name;
DELETE FROM rate_limiter.rate_limits;
DELETE FROM rate_limiter.blocks;
RESET rate_limiter.now_override;
