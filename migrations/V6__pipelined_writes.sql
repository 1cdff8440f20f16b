-- Writes that travel in one pipeline with the COMMIT cannot have their row counts checked by the
-- client before the transaction commits; they check them here instead. A failed check raises,
-- which aborts the transaction, and the pipelined COMMIT then answers ROLLBACK.
--   WITH w AS (UPDATE … RETURNING 1) SELECT core.expect_rows('what', count(*), 1) FROM w
CREATE FUNCTION core.expect_rows(what text, actual bigint, expected bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF actual IS DISTINCT FROM expected THEN
        RAISE EXCEPTION 'muster: % touched % rows, expected %', what, actual, expected
            USING ERRCODE = 'MU001';
    END IF;
    RETURN actual;
END;
$$;
