-- The native extension keeps the time zones calendar windows name for the
-- life of the session, at most 1,000 (docs/shapes.md, "Time zones per
-- session"): a session naming more distinct zones gets 22023 naming
-- time_zone; the zones it already knows keep working. (Native only: the
-- portable edition keeps none, so it has no such bound.)
\set VERBOSITY default
SET intervalstyle = 'postgres';
DO $$
DECLARE
    made int := 0;
BEGIN
    FOR i IN 1..1100 LOOP
        BEGIN
            PERFORM rate_limiter.calendar_window(1, 'day', pg_catalog.format('<+%s>-%s:%s', i, i / 60 % 24, i % 60));
            made := made + 1;
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE NOTICE 'zone % refused: %', i, SQLERRM;
            EXIT;
        END;
    END LOOP;
    RAISE NOTICE '% zones kept', made;
END
$$;
SELECT rate_limiter.calendar_window(1, 'day', '<+1>-0:1');
