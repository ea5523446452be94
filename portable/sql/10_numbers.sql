-- The portable edition (docs/guarantees.md, "Portable edition"): numbers
-- the native extension computes in Rust, computed the same way in SQL so
-- that both editions answer alike.
--
-- * _show(float8): a float in an error message as Rust's Display writes
--   it (the shortest decimal that reads back as the same float, never an
--   exponent): PostgreSQL's float8out gives the same shortest digits, with
--   an exponent below 1e-4 and from 1e15 on, which is written out here.
-- * 64-bit unsigned arithmetic on bigint bit patterns (wrapping add and
--   multiply through numeric, logical shifts, byte order), for the two
--   hashes below.
-- * _xxh3(bytea): XXH3-64 with seed 0 and the default secret, for inputs
--   of 9 bytes and more (what the fixed window's phase hashes: an 8-byte
--   length, the name, a marker byte, the key), as the xxhash-rust crate
--   computes it (algorithm/src/fixed_window.rs); inputs of more than 240
--   bytes by _xxh3_long(bytea), in 12_xxh3_long.sql.
-- * _splitmix64(bigint): the generator behind rate_limiter.random_seed
--   (src/shard_choice.rs): SplitMix64.

-- base^exponent exactly (numeric's ^ rounds large powers), by squaring.
CREATE FUNCTION rate_limiter._power(base numeric, exponent int)
RETURNS numeric
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $power$
DECLARE
    result numeric := 1;
BEGIN
    WHILE exponent > 0 LOOP
        IF exponent % 2 = 1 THEN
            result := result * base;
        END IF;
        base := base * base;
        exponent := exponent / 2;
    END LOOP;
    RETURN result;
END
$power$;

-- The exact decimal value of a finite float, as numeric: m x 2^e with m
-- a whole number below 2^53, and m x 2^-k written out as m x 5^k / 10^k.
CREATE FUNCTION rate_limiter._exact(value float8)
RETURNS numeric
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $exact$
DECLARE
    m float8 := pg_catalog.abs(value);
    e int := 0;
    digits text;
    exact numeric;
BEGIN
    WHILE m >= 9007199254740992 LOOP
        m := m / 2;
        e := e + 1;
    END LOOP;
    WHILE m <> pg_catalog.trunc(m) LOOP
        m := m * 2;
        e := e - 1;
    END LOOP;
    IF e >= 0 THEN
        exact := m::bigint::numeric * rate_limiter._power(2, e);
    ELSE
        digits := (m::bigint::numeric * rate_limiter._power(5, -e))::text;
        -- (lpad would also cut a longer string.)
        digits := pg_catalog.repeat('0', greatest(-e + 1 - pg_catalog.length(digits), 0)) || digits;
        exact := (pg_catalog.left(digits, pg_catalog.length(digits) + e) || '.'
                  || pg_catalog.right(digits, -e))::numeric;
    END IF;
    RETURN CASE WHEN value < 0 THEN -exact ELSE exact END;
END
$exact$;

-- Whether the decimal text reads back as value (false when it is out of
-- float8's range).
CREATE FUNCTION rate_limiter._reads_back(written text, value float8)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $reads_back$
BEGIN
    RETURN written::float8 = value;
EXCEPTION WHEN numeric_value_out_of_range THEN
    RETURN false;
END
$reads_back$;

CREATE FUNCTION rate_limiter._show(value float8)
RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $show$
DECLARE
    exact numeric;
    whole int;
    digits text;
    rounded numeric;
    written text;
BEGIN
    IF value = 'NaN'::float8 THEN
        RETURN 'NaN';
    ELSIF value = 'Infinity'::float8 THEN
        RETURN 'Infinity';
    ELSIF value = '-Infinity'::float8 THEN
        RETURN '-Infinity';
    ELSIF value = 0 THEN
        RETURN CASE WHEN pg_catalog.left(value::text, 1) = '-' THEN '-0' ELSE '0' END;
    END IF;
    -- As 0.DIGITS x 10^whole, DIGITS the exact value's, without leading
    -- zeros.
    exact := pg_catalog.abs(rate_limiter._exact(value));
    IF exact >= 1 THEN
        whole := pg_catalog.length(pg_catalog.split_part(exact::text, '.', 1));
        digits := pg_catalog.rtrim(pg_catalog.split_part(exact::text, '.', 1)
                                   || pg_catalog.split_part(exact::text, '.', 2), '0');
    ELSE
        whole := 0;
        digits := pg_catalog.rtrim(pg_catalog.split_part(exact::text, '.', 2), '0');
        WHILE pg_catalog.left(digits, 1) = '0' LOOP
            digits := pg_catalog.substr(digits, 2);
            whole := whole - 1;
        END LOOP;
    END IF;
    -- The fewest digits that read back as the same float, rounded half up
    -- from the exact value: what Rust's Display writes (never with an
    -- exponent).
    FOR precision IN 1..pg_catalog.length(digits) LOOP
        rounded := pg_catalog.round(('0.' || digits)::numeric, precision);
        IF precision = pg_catalog.length(digits)
           OR rate_limiter._reads_back(rounded::text || 'e' || whole, pg_catalog.abs(value)) THEN
            IF rounded = 1 THEN
                digits := '1';
                whole := whole + 1;
            ELSE
                digits := pg_catalog.rtrim(pg_catalog.substr(rounded::text, 3), '0');
            END IF;
            EXIT;
        END IF;
    END LOOP;
    IF whole <= 0 THEN
        written := '0.' || pg_catalog.repeat('0', -whole) || digits;
    ELSIF whole >= pg_catalog.length(digits) THEN
        written := digits || pg_catalog.repeat('0', whole - pg_catalog.length(digits));
    ELSE
        written := pg_catalog.left(digits, whole) || '.' || pg_catalog.substr(digits, whole + 1);
    END IF;
    RETURN CASE WHEN value < 0 THEN '-' || written ELSE written END;
END
$show$;

-- A bigint's bits as an unsigned 64-bit number.
CREATE FUNCTION rate_limiter._u64(bits bigint)
RETURNS numeric
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT CASE WHEN bits < 0 THEN bits::numeric + 18446744073709551616 ELSE bits::numeric END $$;

-- An integer modulo 2^64, as a bigint's bits.
CREATE FUNCTION rate_limiter._wrap(value numeric)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $wrap$
DECLARE
    rest numeric := pg_catalog.mod(value, 18446744073709551616);
BEGIN
    IF rest < 0 THEN
        rest := rest + 18446744073709551616;
    END IF;
    IF rest >= 9223372036854775808 THEN
        rest := rest - 18446744073709551616;
    END IF;
    RETURN rest::bigint;
END
$wrap$;

-- Wrapping 64-bit addition and multiplication.
CREATE FUNCTION rate_limiter._add64(a bigint, b bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT rate_limiter._wrap(a::numeric + b::numeric) $$;

CREATE FUNCTION rate_limiter._mul64(a bigint, b bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT rate_limiter._wrap(rate_limiter._u64(a) * rate_limiter._u64(b)) $$;

-- Logical shift right by 1 to 63 bits (bigint's >> shifts the sign in).
CREATE FUNCTION rate_limiter._shr64(a bigint, bits int)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (a >> bits) & ~((-1)::bigint << (64 - bits)) $$;

-- The low and high halves of the 128-bit product, XORed (mul128_fold64).
CREATE FUNCTION rate_limiter._fold64(a bigint, b bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $fold$
DECLARE
    product numeric := rate_limiter._u64(a) * rate_limiter._u64(b);
BEGIN
    RETURN rate_limiter._wrap(product) # rate_limiter._wrap(pg_catalog.div(product, 18446744073709551616));
END
$fold$;

-- The little-endian 64-bit number at byte offset (from 0) of data.
CREATE FUNCTION rate_limiter._le64(data bytea, offset_ int)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT ('x' || pg_catalog.string_agg(pg_catalog.lpad(pg_catalog.to_hex(pg_catalog.get_byte(data, offset_ + i)), 2, '0'), '' ORDER BY i DESC))::bit(64)::bigint
    FROM pg_catalog.generate_series(0, 7) AS i
$$;

-- A bigint's 8 bytes, little-endian.
CREATE FUNCTION rate_limiter._le64_bytes(value bigint)
RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT pg_catalog.decode(pg_catalog.string_agg(pg_catalog.substr(hex, 15 - 2 * i, 2), '' ORDER BY i), 'hex')
    FROM (SELECT pg_catalog.lpad(pg_catalog.to_hex(value), 16, '0') AS hex) AS v,
         pg_catalog.generate_series(0, 7) AS i
$$;

-- The bytes of a 64-bit number in the other order.
CREATE FUNCTION rate_limiter._swap64(value bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT rate_limiter._le64(pg_catalog.int8send(value), 0) $$;

-- XXH3's avalanche.
CREATE FUNCTION rate_limiter._xxh3_avalanche(value bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $avalanche$
BEGIN
    value := value # rate_limiter._shr64(value, 37);
    value := rate_limiter._mul64(value, 1609587791953885689);   -- 0x165667919E3779F9
    RETURN value # rate_limiter._shr64(value, 32);
END
$avalanche$;

-- XXH3's default secret (192 bytes).
CREATE FUNCTION rate_limiter._xxh3_secret()
RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '\xb8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671fcb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e'::bytea $$;

-- XXH3's mix of 16 input bytes at offset input_at with 16 secret bytes.
CREATE FUNCTION rate_limiter._xxh3_mix16(input bytea, input_at int, secret bytea, secret_at int)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT rate_limiter._fold64(rate_limiter._le64(input, input_at) # rate_limiter._le64(secret, secret_at),
                                rate_limiter._le64(input, input_at + 8) # rate_limiter._le64(secret, secret_at + 8))
$$;

-- XXH3-64 of input (9 bytes or more), seed 0, default secret.
CREATE FUNCTION rate_limiter._xxh3(input bytea)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $xxh3$
DECLARE
    secret constant bytea := rate_limiter._xxh3_secret();
    len constant int := pg_catalog.length(input);
    prime64_1 constant bigint := -7046029288634856825;   -- 0x9E3779B185EBCA87
    acc bigint;
    lo bigint;
    hi bigint;
    rounds int;
BEGIN
    IF len < 9 THEN
        RAISE EXCEPTION 'rate_limiter._xxh3: an input of % bytes (9 or more expected)', len USING ERRCODE = 'XX000';
    END IF;
    IF len <= 16 THEN
        lo := rate_limiter._le64(input, 0) # (rate_limiter._le64(secret, 24) # rate_limiter._le64(secret, 32));
        hi := rate_limiter._le64(input, len - 8) # (rate_limiter._le64(secret, 40) # rate_limiter._le64(secret, 48));
        acc := rate_limiter._wrap(len::numeric + rate_limiter._u64(rate_limiter._swap64(lo))
                                  + rate_limiter._u64(hi) + rate_limiter._u64(rate_limiter._fold64(lo, hi)));
        RETURN rate_limiter._xxh3_avalanche(acc);
    END IF;
    IF len <= 128 THEN
        acc := rate_limiter._mul64(len, prime64_1);
        IF len > 32 THEN
            IF len > 64 THEN
                IF len > 96 THEN
                    acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, 48, secret, 96));
                    acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, len - 64, secret, 112));
                END IF;
                acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, 32, secret, 64));
                acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, len - 48, secret, 80));
            END IF;
            acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, 16, secret, 32));
            acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, len - 32, secret, 48));
        END IF;
        acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, 0, secret, 0));
        acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, len - 16, secret, 16));
        RETURN rate_limiter._xxh3_avalanche(acc);
    END IF;
    IF len <= 240 THEN
        acc := rate_limiter._mul64(len, prime64_1);
        rounds := len / 16;
        FOR i IN 0..7 LOOP
            acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, 16 * i, secret, 16 * i));
        END LOOP;
        acc := rate_limiter._xxh3_avalanche(acc);
        FOR i IN 8..rounds - 1 LOOP
            acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, 16 * i, secret, 16 * (i - 8) + 3));
        END LOOP;
        acc := rate_limiter._add64(acc, rate_limiter._xxh3_mix16(input, len - 16, secret, 136 - 17));
        RETURN rate_limiter._xxh3_avalanche(acc);
    END IF;
    -- Long inputs: 12_xxh3_long.sql.
    RETURN rate_limiter._xxh3_long(input);
END
$xxh3$;

-- SplitMix64: the next state after state, and the number it gives.
CREATE FUNCTION rate_limiter._splitmix64(state bigint, OUT next_state bigint, OUT number bigint)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $splitmix$
DECLARE
    z bigint;
BEGIN
    next_state := rate_limiter._add64(state, -7046029254386353131);   -- 0x9E3779B97F4A7C15
    z := next_state;
    z := rate_limiter._mul64(z # rate_limiter._shr64(z, 30), -4658895280553007687);   -- 0xBF58476D1CE4E5B9
    z := rate_limiter._mul64(z # rate_limiter._shr64(z, 27), -7723592293110705685);   -- 0x94D049BB133111EB
    number := z # rate_limiter._shr64(z, 31);
END
$splitmix$;
