-- Anonymous edit intake. No raw client IP is stored anywhere: only keyed hashes under a salt
-- that lives one UTC day and is deleted with that day's counters.

-- Edit proposals held for review (pending_approval) until the target's owner decides.
CREATE TABLE core.edits (
    id           uuid        PRIMARY KEY,
    target       text        NOT NULL,
    owner        text        NOT NULL,
    body         text        NOT NULL CHECK (octet_length(body) <= 4096),
    state        text        NOT NULL CHECK (state IN ('pending_approval', 'approved', 'rejected')),
    submitted_at timestamptz NOT NULL,
    decided_at   timestamptz,
    chain_len    bigint      NOT NULL,
    chain_head   bytea       NOT NULL CHECK (length(chain_head) = 32)
);
CREATE INDEX edits_by_state ON core.edits (state, id);

-- Secrets shared by every replica (the proof-of-work MAC key), created on first use.
CREATE TABLE core.intake_secrets (
    name   text  PRIMARY KEY,
    secret bytea NOT NULL CHECK (length(secret) = 32)
);

-- One random salt per UTC day; deleted once the day is over.
CREATE TABLE core.intake_salts (
    day  date  PRIMARY KEY,
    salt bytea NOT NULL CHECK (length(salt) = 32)
);

-- Submissions per salted client hash per day; deleted with the day's salt.
CREATE TABLE core.intake_counts (
    day         date    NOT NULL,
    client_hash bytea   NOT NULL CHECK (length(client_hash) = 32),
    count       integer NOT NULL,
    PRIMARY KEY (day, client_hash)
);

-- Spent proof-of-work challenges (by BLAKE3 of the token); deleted once expired.
CREATE TABLE core.pow_spent (
    spend_key  bytea       PRIMARY KEY CHECK (length(spend_key) = 32),
    expires_at timestamptz NOT NULL
);
