-- guard(): a trigger that rate-limits the rows written to a table. Each
-- inserted or updated row consumes from the limit (keyed by a column, with
-- the count from a column); a refusal raises the rate-limit error and the
-- whole statement is rolled back.
SET rate_limiter.now_override = '2026-01-01 00:00:00+00';

-- Two sign-ups an hour, for everyone together (the global limit).
SELECT rate_limiter.define('guard_signup', rate_limiter.token_bucket(2, '1 hour'));
CREATE TABLE guard_signups (id serial PRIMARY KEY, email text NOT NULL);
CREATE TRIGGER guard BEFORE INSERT ON guard_signups
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('guard_signup');
INSERT INTO guard_signups (email) VALUES ('a@example.com');
INSERT INTO guard_signups (email) VALUES ('b@example.com');
\set VERBOSITY default
INSERT INTO guard_signups (email) VALUES ('c@example.com');
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT email FROM guard_signups ORDER BY id;

-- Per key (a column) with a count (a column): seats per organisation.
-- A multi-row statement that runs out is rolled back whole.
SELECT rate_limiter.define('guard_seats', rate_limiter.token_bucket(10, '1 day'));
CREATE TABLE guard_members (org text, seats int);
CREATE TRIGGER guard BEFORE INSERT OR UPDATE ON guard_members
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('guard_seats', 'org', 'seats');
INSERT INTO guard_members VALUES ('acme', 6), ('globex', 9);
INSERT INTO guard_members VALUES ('acme', 3), ('acme', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT org, sum(seats) FROM guard_members GROUP BY org ORDER BY org;
SELECT key, value FROM rate_limiter.rate_limits WHERE name = 'guard_seats' ORDER BY key;
-- Updates are guarded too.
UPDATE guard_members SET seats = 4 WHERE org = 'acme';
SELECT key, value FROM rate_limiter.rate_limits WHERE name = 'guard_seats' ORDER BY key;
-- A row asking for more than the capacity is an error (22023), not a
-- refusal, and its hint works in a trigger, which cannot pass reserve.
\set VERBOSITY default
\set SHOW_CONTEXT never
INSERT INTO guard_members VALUES ('initech', 11);
\set SHOW_CONTEXT errors
\set VERBOSITY terse

-- Misuse is an error when the trigger fires.
CREATE TABLE guard_misuse (x int);
CREATE TRIGGER wrong_time AFTER INSERT ON guard_misuse
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('guard_seats');
INSERT INTO guard_misuse VALUES (1);
DROP TRIGGER wrong_time ON guard_misuse;
CREATE TRIGGER no_name BEFORE INSERT ON guard_misuse
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard();
INSERT INTO guard_misuse VALUES (1);
DROP TRIGGER no_name ON guard_misuse;
CREATE TRIGGER no_column BEFORE INSERT ON guard_misuse
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('guard_seats', 'org');
INSERT INTO guard_misuse VALUES (1);
DROP TRIGGER no_column ON guard_misuse;
CREATE TRIGGER undefined BEFORE INSERT ON guard_misuse
    FOR EACH ROW EXECUTE FUNCTION rate_limiter.guard('no such limit');
INSERT INTO guard_misuse VALUES (1);
SELECT count(*) FROM guard_misuse;

DROP TABLE guard_signups, guard_members, guard_misuse;
SELECT rate_limiter.rate_reset('guard_signup'), rate_limiter.undefine('guard_signup');
SELECT rate_limiter.rate_reset('guard_seats', org) FROM (VALUES ('acme'), ('globex')) o(org);
SELECT rate_limiter.undefine('guard_seats');
