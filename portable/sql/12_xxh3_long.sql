-- XXH3-64's long-input path (inputs of more than 240 bytes), for
-- _xxh3(bytea) of 10_numbers.sql: seed 0, the default secret (192 bytes).
--
-- The specification's loop: 8 accumulators over the input's 64-byte
-- stripes, 16 stripes a block (1,024 bytes), a scramble of every
-- accumulator after each whole block; then the last block's whole stripes
-- (not scrambled), the input's last 64 bytes as one more stripe, and the
-- merge. For stripe s of a block and lane i (0 to 7), with d the
-- little-endian 64-bit word at byte 8i of the stripe, k the secret's at
-- byte 8s + 8i, and dk = d XOR k:
--     acc[i XOR 1] += d;   acc[i] += (dk & 0xFFFFFFFF) * (dk >> 32)
-- (modulo 2^64). Within a block these are sums of independent terms, so
-- one query decodes every word of the input and sums each block's terms
-- per accumulator (a loop of 8 statements a word in PL/pgSQL took 2 s and
-- more for an input of a MiB); only the scrambles, one per block, run in
-- order. A term is summed in 32-bit and 16-bit parts, so that a bigint
-- holds every product, and the sums are taken modulo 2^64 at the end.
CREATE FUNCTION rate_limiter._xxh3_long(input bytea)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $long$
DECLARE
    -- A plain copy: a compressed or out-of-line input would otherwise be
    -- expanded anew by every get_byte of the query.
    data constant bytea := input || '\x'::bytea;
    secret constant bytea := rate_limiter._xxh3_secret();
    len constant int := pg_catalog.length(data);
    prime64_1 constant bigint := -7046029288634856825;   -- 0x9E3779B185EBCA87
    -- Whole blocks (scrambled after), and the whole stripes of the last
    -- block (its last byte excluded: an input of whole blocks ends with a
    -- block of 15 stripes, the 16th being the last stripe below).
    blocks constant int := (len - 1) / 1024;
    words constant int := 8 * (16 * blocks + ((len - 1) - 1024 * blocks) / 64);
    key_low bigint[];
    key_high bigint[];
    terms bigint[];
    accs bigint[] := ARRAY[3266489917::bigint, prime64_1, -4417276706812531889, 1609587929392839161,
                           -8796714831421723037, 2246822519, 2870177450012600261, 2654435761];
    acc bigint;
    term bigint;
    low bigint;
    product numeric;
    data_val bigint;
    data_key bigint;
BEGIN
    IF len <= 240 THEN
        RAISE EXCEPTION 'rate_limiter._xxh3_long: an input of % bytes (241 or more expected)', len USING ERRCODE = 'XX000';
    END IF;
    -- The secret's 64-bit words at bytes 0, 8, ..., 184, in 32-bit halves.
    SELECT pg_catalog.array_agg(rate_limiter._le64(secret, 8 * j) & 4294967295 ORDER BY j),
           pg_catalog.array_agg((rate_limiter._le64(secret, 8 * j) >> 32) & 4294967295 ORDER BY j)
      INTO key_low, key_high
      FROM pg_catalog.generate_series(0, 23) AS j;
    -- Per block and accumulator (block * 8 + lane + 1), the sum of its
    -- terms modulo 2^64, as a bigint's bits.
    WITH word AS (
        SELECT w / 128 AS block, w % 8 AS lane, d_low, d_high,
               d_low # key_low[k] AS dk_low, d_high # key_high[k] AS dk_high
          FROM (SELECT w, (w % 128) / 8 + w % 8 + 1 AS k,
                       ((pg_catalog.get_byte(data, 8 * w) | (pg_catalog.get_byte(data, 8 * w + 1) << 8)
                         | (pg_catalog.get_byte(data, 8 * w + 2) << 16))::bigint
                        | (pg_catalog.get_byte(data, 8 * w + 3)::bigint << 24)) AS d_low,
                       ((pg_catalog.get_byte(data, 8 * w + 4) | (pg_catalog.get_byte(data, 8 * w + 5) << 8)
                         | (pg_catalog.get_byte(data, 8 * w + 6) << 16))::bigint
                        | (pg_catalog.get_byte(data, 8 * w + 7)::bigint << 24)) AS d_high
                  FROM pg_catalog.generate_series(0, words - 1) AS w
                OFFSET 0) AS decoded   -- (each word decoded once, not once a use)
    ), sums AS (
        SELECT block, lane,
               pg_catalog.sum(d_low) + pg_catalog.sum(d_high) * 4294967296 AS data_sum,
               pg_catalog.sum(dk_low * (dk_high & 65535)) + pg_catalog.sum(dk_low * (dk_high >> 16)) * 65536 AS product_sum
          FROM word
         GROUP BY block, lane
    )
    SELECT pg_catalog.array_agg(CASE WHEN sum_ >= 9223372036854775808 THEN sum_ - 18446744073709551616 ELSE sum_ END::bigint
                                ORDER BY block, lane)
      INTO terms
      FROM (SELECT mine.block, mine.lane,
                   pg_catalog.mod(mine.product_sum + other.data_sum, 18446744073709551616) AS sum_
              FROM sums AS mine
              JOIN sums AS other ON other.block = mine.block AND other.lane = mine.lane # 1) AS summed;
    -- The blocks in order: add each one's sums, scramble after a whole one.
    FOR b IN 0..blocks LOOP
        FOR lane IN 0..7 LOOP
            term := terms[8 * b + lane + 1];
            CONTINUE WHEN term IS NULL;   -- a last block without a whole stripe
            acc := accs[lane + 1];
            -- Wrapping addition, in 32-bit halves.
            low := (acc & 4294967295) + (term & 4294967295);
            acc := (((acc >> 32) + (term >> 32) + (low >> 32)) << 32) | (low & 4294967295);
            IF b < blocks THEN
                acc := acc # ((acc >> 47) & 131071) # ((key_high[16 + lane + 1] << 32) | key_low[16 + lane + 1]);
                product := pg_catalog.mod((acc::numeric + CASE WHEN acc < 0 THEN 18446744073709551616 ELSE 0 END)
                                          * 2654435761, 18446744073709551616);
                acc := CASE WHEN product >= 9223372036854775808 THEN product - 18446744073709551616 ELSE product END::bigint;
            END IF;
            accs[lane + 1] := acc;
        END LOOP;
    END LOOP;
    -- The last stripe.
    FOR lane IN 0..7 LOOP
        data_val := rate_limiter._le64(data, len - 64 + 8 * lane);
        data_key := data_val # rate_limiter._le64(secret, 192 - 64 - 7 + 8 * lane);
        accs[(lane # 1) + 1] := rate_limiter._add64(accs[(lane # 1) + 1], data_val);
        accs[lane + 1] := rate_limiter._wrap(rate_limiter._u64(accs[lane + 1])
            + (data_key & 4294967295)::numeric * rate_limiter._shr64(data_key, 32)::numeric);
    END LOOP;
    -- The merge.
    acc := rate_limiter._mul64(len, prime64_1);
    FOR pair IN 0..3 LOOP
        acc := rate_limiter._add64(acc, rate_limiter._fold64(
            accs[2 * pair + 1] # rate_limiter._le64(secret, 11 + 16 * pair),
            accs[2 * pair + 2] # rate_limiter._le64(secret, 11 + 16 * pair + 8)));
    END LOOP;
    RETURN rate_limiter._xxh3_avalanche(acc);
END
$long$;
