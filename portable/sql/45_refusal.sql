-- The portable edition (docs/guarantees.md, "Portable edition"): the
-- refusal of a call with throws => true, raised as the native extension
-- raises it (src/errors.rs): SQLSTATE rate_limiter.sqlstate (default
-- RL429), a message naming the limit and key, a DETAIL that is a JSON
-- object as serde_json writes it, and a HINT.

-- A float as serde_json writes it (the ryu crate's format: "12000.0",
-- "0.5", "1e21", "1.5e-7"; null when not finite).
CREATE FUNCTION rate_limiter._json_number(value float8)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET extra_float_digits = 1
AS $json_number$
DECLARE
    written text;
    negative boolean;
    mantissa text;
    exponent int;
    digits text;
    kk int;
BEGIN
    IF value = 'NaN'::float8 OR value = 'Infinity'::float8 OR value = '-Infinity'::float8 THEN
        RETURN 'null';
    END IF;
    IF value = 0 THEN
        RETURN CASE WHEN value::text LIKE '-%' THEN '-0.0' ELSE '0.0' END;
    END IF;
    -- The shortest digits and the exponent, from float8out.
    written := value::text;
    negative := pg_catalog.left(written, 1) = '-';
    IF negative THEN
        written := pg_catalog.substr(written, 2);
    END IF;
    mantissa := pg_catalog.split_part(written, 'e', 1);
    exponent := coalesce(nullif(pg_catalog.split_part(written, 'e', 2), '')::int, 0);
    digits := pg_catalog.replace(mantissa, '.', '');
    kk := CASE WHEN pg_catalog.strpos(mantissa, '.') > 0
               THEN pg_catalog.strpos(mantissa, '.') - 1 ELSE pg_catalog.length(mantissa) END + exponent;
    -- Leading zeros ("0.001" from float8out) are not digits.
    WHILE pg_catalog.length(digits) > 1 AND pg_catalog.left(digits, 1) = '0' LOOP
        digits := pg_catalog.substr(digits, 2);
        kk := kk - 1;
    END LOOP;
    digits := pg_catalog.rtrim(digits, '0');
    IF digits = '' THEN
        digits := '0';
    END IF;
    -- 10^(kk-1) <= value < 10^kk, digits without trailing zeros.
    IF pg_catalog.length(digits) <= kk AND kk <= 16 THEN
        written := digits || pg_catalog.repeat('0', kk - pg_catalog.length(digits)) || '.0';
    ELSIF 0 < kk AND kk <= 16 THEN
        written := pg_catalog.left(digits, kk) || '.' || pg_catalog.substr(digits, kk + 1);
    ELSIF -5 < kk AND kk <= 0 THEN
        written := '0.' || pg_catalog.repeat('0', -kk) || digits;
    ELSIF pg_catalog.length(digits) = 1 THEN
        written := digits || 'e' || (kk - 1);
    ELSE
        written := pg_catalog.left(digits, 1) || '.' || pg_catalog.substr(digits, 2) || 'e' || (kk - 1);
    END IF;
    RETURN CASE WHEN negative THEN '-' ELSE '' END || written;
END
$json_number$;

-- A name or key as a JSON string (names::for_json, then ascii_json in a
-- database that is not UTF8): converted to Unicode (in SQL_ASCII byte b
-- is U+00b), escaped as serde_json escapes, and outside a UTF8 database
-- every character beyond ASCII written as \u escapes of its UTF-16 units.
CREATE FUNCTION rate_limiter._json_string(value text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $json_string$
DECLARE
    encoding text := pg_catalog.getdatabaseencoding();
    bytes bytea;
    utf8 bytea;
    out text := '"';
    b int;
    code int;
    at int := 0;
    width int;
BEGIN
    IF encoding = 'UTF8' THEN
        RETURN pg_catalog.to_json(value)::text;
    END IF;
    bytes := pg_catalog.convert_to(value, encoding);
    IF encoding = 'SQL_ASCII' THEN
        utf8 := NULL;
    ELSE
        BEGIN
            utf8 := pg_catalog.convert(bytes, encoding, 'UTF8');
        EXCEPTION WHEN OTHERS THEN
            utf8 := NULL;
        END;
    END IF;
    IF utf8 IS NULL THEN
        -- Byte b as U+00b.
        utf8 := ''::bytea;
        FOR i IN 0..pg_catalog.length(bytes) - 1 LOOP
            b := pg_catalog.get_byte(bytes, i);
            utf8 := utf8 || CASE WHEN b < 128 THEN pg_catalog.set_byte('\x00'::bytea, 0, b)
                                 ELSE pg_catalog.decode(pg_catalog.lpad(pg_catalog.to_hex(192 + (b >> 6)), 2, '0')
                                                        || pg_catalog.lpad(pg_catalog.to_hex(128 + (b & 63)), 2, '0'), 'hex') END;
        END LOOP;
    END IF;
    WHILE at < pg_catalog.length(utf8) LOOP
        b := pg_catalog.get_byte(utf8, at);
        IF b < 128 THEN
            width := 1;
            code := b;
        ELSIF b < 224 THEN
            width := 2;
            code := ((b & 31) << 6) | (pg_catalog.get_byte(utf8, at + 1) & 63);
        ELSIF b < 240 THEN
            width := 3;
            code := ((b & 15) << 12) | ((pg_catalog.get_byte(utf8, at + 1) & 63) << 6) | (pg_catalog.get_byte(utf8, at + 2) & 63);
        ELSE
            width := 4;
            code := ((b & 7) << 18) | ((pg_catalog.get_byte(utf8, at + 1) & 63) << 12)
                    | ((pg_catalog.get_byte(utf8, at + 2) & 63) << 6) | (pg_catalog.get_byte(utf8, at + 3) & 63);
        END IF;
        at := at + width;
        IF code = 34 THEN
            out := out || '\"';
        ELSIF code = 92 THEN
            out := out || '\\';
        ELSIF code = 8 THEN
            out := out || '\b';
        ELSIF code = 12 THEN
            out := out || '\f';
        ELSIF code = 10 THEN
            out := out || '\n';
        ELSIF code = 13 THEN
            out := out || '\r';
        ELSIF code = 9 THEN
            out := out || '\t';
        ELSIF code < 32 THEN
            out := out || '\u' || pg_catalog.lpad(pg_catalog.to_hex(code), 4, '0');
        ELSIF code < 128 THEN
            out := out || pg_catalog.chr(code);
        ELSIF code < 65536 THEN
            out := out || '\u' || pg_catalog.lpad(pg_catalog.to_hex(code), 4, '0');
        ELSE
            code := code - 65536;
            out := out || '\u' || pg_catalog.to_hex(55296 + (code >> 10)) || '\u' || pg_catalog.to_hex(56320 + (code & 1023));
        END IF;
    END LOOP;
    RETURN out || '"';
END
$json_string$;

-- Raises the refusal of (name, key): retry_after in microseconds,
-- remaining in tokens; blocked: a block refused it (the DETAIL says so, and
-- its reason). Never returns.
CREATE FUNCTION rate_limiter._refuse(name text, key text, retry_after bigint, remaining float8,
                                     blocked boolean DEFAULT NULL, reason text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $refuse$
DECLARE
    milliseconds float8 := retry_after::float8 / 1000.0::float8;
    code text := rate_limiter._sqlstate();
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = code,
        MESSAGE = CASE WHEN key IS NULL
                       THEN pg_catalog.format('rate limit "%s" exceeded (global limit)', rate_limiter._for_message(name))
                       ELSE pg_catalog.format('rate limit "%s" exceeded for key "%s"', rate_limiter._for_message(name),
                                              rate_limiter._for_message(key)) END,
        DETAIL = '{"name":' || rate_limiter._json_string(name)
                 || ',"key":' || coalesce(rate_limiter._json_string(key), 'null')
                 || ',"retry_after_ms":' || rate_limiter._json_number(milliseconds)
                 || ',"remaining":' || rate_limiter._json_number(rate_limiter._shown(remaining))
                 || CASE WHEN blocked THEN ',"blocked":true,"reason":' || coalesce(rate_limiter._json_string(reason), 'null')
                         ELSE '' END || '}',
        HINT = 'Retry after ' || rate_limiter._show(milliseconds) || ' ms.';
END
$refuse$;
