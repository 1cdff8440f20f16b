# Shortcuts for the project's tasks; each is `cargo xtask <task>` (CI needs no `just`).

default:
    @just --list

# run the server locally: throwaway PostgreSQL (unless MUSTER_DATABASE_URL is set), migrations, dev tokens
up *ARGS:
    cargo xtask up {{ARGS}}

# the project's test command: fmt check, clippy, all tests against a throwaway PostgreSQL
test *ARGS:
    cargo xtask test {{ARGS}}

# apply migrations to MUSTER_DATABASE_URL
migrate *ARGS:
    cargo xtask migrate {{ARGS}}

# verify the ledger's hash chains in MUSTER_DATABASE_URL
ledger-verify *ARGS:
    cargo xtask ledger-verify {{ARGS}}

# a throwaway PostgreSQL cluster until Ctrl-C
db:
    cargo xtask db
