//! The runtime role's grants against the catalog, and what it cannot do to the ledger.

use super::*;
use muster_testkit::{TestDb, fresh_db};

/// Objects of schema `core` (tables, sequences, views, functions) not in [`RUNTIME_GRANTS`],
/// and listed objects missing from the catalog.
async fn unlisted_objects(db: &TestDb) -> (Vec<String>, Vec<String>) {
    let client = db.client().await;
    let rows = client
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c
             WHERE c.relnamespace = 'core'::regnamespace AND c.relkind IN ('r', 'p', 'S', 'v', 'm', 'f')
             UNION ALL
             SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'core'::regnamespace
             ORDER BY 1",
            &[],
        )
        .await
        .expect("the catalog");
    let in_catalog: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let listed: Vec<String> = RUNTIME_GRANTS
        .iter()
        .map(|g| g.object.replace(", ", ","))
        .collect();
    let unlisted = in_catalog
        .iter()
        .filter(|o| !listed.contains(o))
        .cloned()
        .collect();
    let gone = listed
        .iter()
        .filter(|o| !in_catalog.contains(o))
        .cloned()
        .collect();
    (unlisted, gone)
}

/// A fresh database after `sql` ran in it as the superuser, `{db}` in it replaced by the
/// database's name (for roles, which are the cluster's, of this test only).
async fn db_after(sql: &str) -> TestDb {
    let db = fresh_db().await;
    db.execute(&sql.replace("{db}", &db.name)).await;
    db
}

async fn differences_of(db: &TestDb, role: &str) -> (Vec<String>, Vec<String>) {
    privilege_differences(&db.client().await, role)
        .await
        .expect("the privileges")
}

async fn differences(db: &TestDb) -> (Vec<String>, Vec<String>) {
    differences_of(db, DEFAULT_RUNTIME_ROLE).await
}

#[tokio::test]
async fn every_table_sequence_and_function_of_the_schema_is_in_the_grant_list() {
    let db = fresh_db().await;
    assert_eq!(unlisted_objects(&db).await, (vec![], vec![]));
}

#[tokio::test]
async fn a_table_added_without_a_line_in_the_grant_list_is_found() {
    let db = db_after("CREATE TABLE core.forgotten (id int)").await;
    assert_eq!(
        unlisted_objects(&db).await,
        (vec!["core.forgotten".to_owned()], vec![])
    );
}

#[tokio::test]
async fn the_runtime_role_has_exactly_the_listed_privileges() {
    let db = fresh_db().await;
    assert_eq!(differences(&db).await, (vec![], vec![]));
}

/// One test per change made as the superuser: the runtime role's privileges then differ from
/// the list by exactly (`missing`, `extra`).
macro_rules! found_after {
    ($($name:ident: $sql:literal => ($missing:expr, $extra:expr),)*) => {$(
        #[tokio::test]
        async fn $name() {
            let (missing, extra): (&[&str], &[&str]) = ($missing, $extra);
            assert_eq!(differences(&db_after($sql).await).await, (lines(missing), lines(extra)));
        }
    )*};
}

fn lines(l: &[&str]) -> Vec<String> {
    l.iter().map(|s| (*s).to_owned()).collect()
}

found_after! {
    a_privilege_granted_beyond_the_list_is_found:
        "GRANT DELETE ON core.ledger TO muster_app" => (&[], &["DELETE on core.ledger"]),
    a_privilege_revoked_from_the_list_is_found:
        "REVOKE INSERT ON core.leases FROM muster_app" => (&["INSERT on core.leases"], &[]),
    insert_on_the_whole_ledger_is_found_as_insert_into_seq_and_tx:
        "GRANT INSERT ON core.ledger TO muster_app"
        => (&[], &["INSERT (seq) on core.ledger", "INSERT (tx) on core.ledger"]),
    a_ledger_column_revoked_from_the_list_is_found:
        "REVOKE INSERT (hash) ON core.ledger FROM muster_app"
        => (&["INSERT (hash) on core.ledger"], &[]),
    a_privilege_on_one_column_of_a_table_is_found:
        "GRANT UPDATE (seq) ON core.ledger TO muster_app" => (&[], &["UPDATE on core.ledger"]),
    create_in_the_schema_is_found:
        "GRANT CREATE ON SCHEMA core TO muster_app" => (&[], &["CREATE on schema core"]),
}

#[tokio::test]
async fn a_privilege_a_noinherit_member_can_set_role_to_is_found() {
    let db = db_after(
        "CREATE ROLE {db}_w NOLOGIN; GRANT UPDATE ON core.ledger TO {db}_w;
         CREATE ROLE {db}_l NOLOGIN NOINHERIT IN ROLE {db}_w",
    )
    .await;
    let (_, extra) = differences_of(&db, &format!("{}_l", db.name)).await;
    assert_eq!(extra, ["UPDATE on core.ledger"]);
}

#[tokio::test]
async fn the_runtime_role_owns_nothing_and_is_no_superuser() {
    let db = fresh_db().await;
    let owned: i64 = db
        .client()
        .await
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class WHERE relowner = r.oid)
                  + (SELECT count(*) FROM pg_proc WHERE proowner = r.oid)
                  + (SELECT count(*) FROM pg_namespace WHERE nspowner = r.oid)
                  + (SELECT count(*) FROM pg_type WHERE typowner = r.oid)
                  + CASE WHEN r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolbypassrls THEN 1000 ELSE 0 END
             FROM pg_roles r WHERE r.rolname = 'muster_app'",
            &[],
        )
        .await
        .expect("the role")
        .get(0);
    assert_eq!(owned, 0);
}

#[tokio::test]
async fn migrate_again_keeps_exactly_the_listed_privileges() {
    let db = fresh_db().await;
    let client = db.client().await;
    client
        .batch_execute("GRANT ALL ON core.ledger TO muster_app")
        .await
        .expect("an over-grant");
    crate::migrate(&db.pool(), DEFAULT_RUNTIME_ROLE)
        .await
        .expect("migrate");
    assert_eq!(differences(&db).await, (vec![], vec![]));
}

#[tokio::test]
async fn migrate_leaves_alone_a_listed_object_a_newer_release_dropped() {
    let db = db_after("DROP TABLE core.pow_spent").await;
    assert_eq!(
        crate::migrate(&db.pool(), DEFAULT_RUNTIME_ROLE)
            .await
            .expect("migrate"),
        Vec::<i32>::new()
    );
}

#[tokio::test]
async fn migrate_as_the_runtime_role_is_refused() {
    let db = fresh_db().await;
    let pool = crate::connect_pool(&db.app_url, &crate::PoolSettings::default()).expect("pool");
    let e = crate::migrate(&pool, DEFAULT_RUNTIME_ROLE)
        .await
        .expect_err("refused");
    assert_eq!(e.code(), "E_DB_ROLE");
}

#[tokio::test]
async fn the_runtime_role_is_created_nologin_when_absent() {
    let db = fresh_db().await;
    crate::migrate(&db.pool(), "muster_app_nologin_probe")
        .await
        .expect("migrate");
    let login: bool = db
        .client()
        .await
        .query_one(
            "SELECT rolcanlogin FROM pg_roles WHERE rolname = 'muster_app_nologin_probe'",
            &[],
        )
        .await
        .expect("the new role")
        .get(0);
    assert!(!login);
}

#[test]
fn a_role_name_that_would_need_quoting_is_refused() {
    for bad in ["", "Muster", "app; DROP TABLE x", "1app", "pg_app", "a-b"] {
        assert!(validate_role(bad).is_err(), "{bad:?}");
    }
    assert!(validate_role("muster_app2").is_ok());
}

/// What [`check_connected_role`] says of `login` (a role of `db`'s cluster with a login and
/// the password `pw`, or `muster_app`).
async fn check_as(db: &TestDb, login: &str) -> RoleCheck {
    let password = match login {
        DEFAULT_RUNTIME_ROLE => muster_testkit::RUNTIME_PASSWORD,
        _ => "pw",
    };
    let url = muster_testkit::with_user(&db.url, login, password);
    let pool = crate::connect_pool(&url, &crate::PoolSettings::default()).expect("pool");
    check_connected_role(&pool.get().await.expect("connect"))
        .await
        .expect("check")
}

#[tokio::test]
async fn the_runtime_role_is_reported_as_such_at_connection() {
    let db = fresh_db().await;
    assert_eq!(
        check_as(&db, DEFAULT_RUNTIME_ROLE).await,
        RoleCheck::Runtime {
            role: "muster_app".into(),
            extra: vec![]
        }
    );
}

#[tokio::test]
async fn a_runtime_role_with_a_privilege_beyond_its_grants_is_reported_with_it() {
    let db = db_after("GRANT DELETE ON core.ledger TO muster_app").await;
    assert_eq!(
        check_as(&db, DEFAULT_RUNTIME_ROLE).await,
        RoleCheck::Runtime {
            role: "muster_app".into(),
            extra: vec!["DELETE on core.ledger".into()]
        }
    );
}

#[tokio::test]
async fn a_superuser_is_reported_as_privileged_at_connection() {
    let db = fresh_db().await;
    let check = check_connected_role(&db.client().await)
        .await
        .expect("check");
    assert!(
        matches!(&check, RoleCheck::Privileged { why, .. } if why == "a superuser"),
        "{check:?}"
    );
}

/// One test per login `{db}_l` set up by the statements: it is privileged, for the reason
/// given (`{db}` the database's name).
macro_rules! privileged_at_connection {
    ($($name:ident: $sql:literal => $why:literal,)*) => {$(
        #[tokio::test]
        async fn $name() {
            let db = db_after($sql).await;
            let login = format!("{}_l", db.name);
            assert_eq!(
                check_as(&db, &login).await,
                RoleCheck::Privileged { role: login, why: $why.replace("{db}", &db.name) }
            );
        }
    )*};
}

privileged_at_connection! {
    a_noinherit_member_of_the_schema_owner_is_reported_privileged:
        "CREATE ROLE {db}_o NOLOGIN; ALTER TABLE core.ledger OWNER TO {db}_o;
         CREATE ROLE {db}_l LOGIN PASSWORD 'pw' NOINHERIT IN ROLE {db}_o"
        => "a member of the schema owner {db}_o (it can SET ROLE {db}_o, NOINHERIT or not)",
    a_member_of_a_superuser_role_is_reported_privileged:
        "CREATE ROLE {db}_s NOLOGIN SUPERUSER;
         CREATE ROLE {db}_l LOGIN PASSWORD 'pw' NOINHERIT IN ROLE {db}_s"
        => "a member of the superuser role {db}_s (it can SET ROLE to it)",
    a_login_with_createrole_is_reported_privileged:
        "CREATE ROLE {db}_l LOGIN PASSWORD 'pw' CREATEROLE"
        => "a role with CREATEROLE (it can create roles and grant them)",
    a_member_of_a_role_with_createrole_is_reported_privileged:
        "CREATE ROLE {db}_c NOLOGIN CREATEROLE;
         CREATE ROLE {db}_l LOGIN PASSWORD 'pw' IN ROLE {db}_c"
        => "a member of {db}_c, which has CREATEROLE (it can SET ROLE to it)",
}

#[tokio::test]
async fn a_runtime_role_that_lacks_a_grant_is_reported_with_the_grant() {
    let db = db_after("REVOKE UPDATE ON core.items FROM muster_app").await;
    assert_eq!(
        check_as(&db, DEFAULT_RUNTIME_ROLE).await,
        RoleCheck::Missing {
            role: "muster_app".into(),
            missing: vec!["UPDATE on core.items".into()],
            extra: vec![]
        }
    );
}

#[tokio::test]
async fn a_login_without_usage_on_the_schema_is_reported_missing_it_not_refused() {
    let db = db_after("CREATE ROLE {db}_l LOGIN PASSWORD 'pw'").await;
    let check = check_as(&db, &format!("{}_l", db.name)).await;
    let RoleCheck::Missing { missing, .. } = check else {
        panic!("{check:?}");
    };
    assert_eq!(
        missing.last().map(String::as_str),
        Some("USAGE on schema core")
    );
}

/// Runs `sql` as the runtime role on a database with a ledger row; answers the SQLSTATE.
async fn as_runtime_role(sql: &str) -> String {
    let db = fresh_db().await;
    db.client()
        .await
        .batch_execute(
            "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at, data, prev_hash, hash)
             VALUES ('item', 'x', 1, 'enqueued', 'test', now(), '{}', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'))",
        )
        .await
        .expect("a ledger row");
    let (client, conn) = tokio_postgres::connect(&db.app_url, tokio_postgres::NoTls)
        .await
        .expect("connect as the runtime role");
    tokio::spawn(conn);
    match client.batch_execute(sql).await {
        Ok(()) => "ran".into(),
        Err(e) => e
            .code()
            .map(|c| c.code().to_owned())
            .unwrap_or_else(|| e.to_string()),
    }
}

/// One test per statement: the runtime role is refused with 42501 (insufficient_privilege).
macro_rules! refused_to_the_runtime_role {
    ($($name:ident: $sql:literal,)*) => {$(
        #[tokio::test]
        async fn $name() {
            assert_eq!(as_runtime_role($sql).await, "42501", "{}", $sql);
        }
    )*};
}

#[tokio::test]
async fn the_runtime_role_cannot_update_the_ledger() {
    assert_eq!(
        as_runtime_role("UPDATE core.ledger SET actor = 'forger'").await,
        "42501"
    );
}

refused_to_the_runtime_role! {
    the_runtime_role_cannot_delete_from_the_ledger: "DELETE FROM core.ledger",
    the_runtime_role_cannot_truncate_the_ledger: "TRUNCATE core.ledger",
    the_runtime_role_cannot_alter_the_ledger: "ALTER TABLE core.ledger ADD COLUMN forged text",
    the_runtime_role_cannot_drop_the_ledger: "DROP TABLE core.ledger",
    the_runtime_role_cannot_switch_off_the_ledgers_triggers: "ALTER TABLE core.ledger DISABLE TRIGGER USER",
    the_runtime_role_cannot_switch_off_every_trigger_of_the_ledger: "ALTER TABLE core.ledger DISABLE TRIGGER ALL",
    the_runtime_role_cannot_drop_a_ledger_trigger: "DROP TRIGGER ledger_no_update_delete ON core.ledger",
    the_runtime_role_cannot_add_a_trigger_to_the_ledger: "CREATE TRIGGER forged BEFORE INSERT ON core.ledger FOR EACH ROW EXECUTE FUNCTION core.ledger_refuse_change()",
    the_runtime_role_cannot_replace_the_ledgers_trigger_function: "CREATE OR REPLACE FUNCTION core.ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
    the_runtime_role_cannot_drop_the_ledgers_trigger_function: "DROP FUNCTION core.ledger_refuse_change() CASCADE",
    the_runtime_role_cannot_replace_a_function_it_calls: "CREATE OR REPLACE FUNCTION core.expect_rows(what text, actual bigint, expected bigint) RETURNS bigint LANGUAGE sql AS $$ SELECT actual $$",
    the_runtime_role_cannot_take_the_ledger_over: "ALTER TABLE core.ledger OWNER TO muster_app",
    the_runtime_role_cannot_skip_triggers_as_a_replica: "SET session_replication_role = replica",
    the_runtime_role_cannot_create_objects_in_the_schema: "CREATE TABLE core.forged (id int)",
    the_runtime_role_cannot_rewrite_the_migration_history: "UPDATE core.schema_migrations SET checksum = '\\x00'",
    the_runtime_role_cannot_choose_a_ledger_seq: "INSERT INTO core.ledger (seq, subject_type, subject_id, subject_seq, event, actor, at, data, prev_hash, hash)
        OVERRIDING SYSTEM VALUE
        VALUES (999999999, 'item', 'x', 2, 'leased', 'test', now(), '{}', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'))",
    the_runtime_role_cannot_choose_a_ledger_rows_transaction: "INSERT INTO core.ledger (tx, subject_type, subject_id, subject_seq, event, actor, at, data, prev_hash, hash)
        VALUES ('1', 'item', 'x', 2, 'leased', 'test', now(), '{}', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'))",
}

#[tokio::test]
async fn the_runtime_role_can_append_to_and_read_the_ledger() {
    assert_eq!(
        as_runtime_role(
            "INSERT INTO core.ledger (subject_type, subject_id, subject_seq, event, actor, at, data, prev_hash, hash)
             VALUES ('item', 'x', 2, 'leased', 'test', now(), '{}', decode(repeat('00', 32), 'hex'), decode(repeat('00', 32), 'hex'));
             SELECT count(*) FROM core.ledger"
        )
        .await,
        "ran"
    );
}

#[tokio::test]
async fn the_runtime_role_appends_to_the_ledger_through_the_adapter() {
    use muster_app::ports::Logbook;
    let db = fresh_db().await;
    let pool = crate::connect_pool(&db.app_url, &crate::PoolSettings::default()).expect("pool");
    let logbook = crate::PgLogbook::new(pool);
    let now = muster_ledger::truncate_to_micros(time::OffsetDateTime::now_utc());
    let (_, entry) = muster_domain::edit::Edit::submit(
        muster_domain::edit::EditId(uuid::Uuid::now_v7()),
        "docs/intro",
        "alice",
        "better wording",
        muster_domain::Principal::Conn,
        now,
    );
    let mut tx = logbook.begin().await.expect("begin");
    let seqs = tx.append(&[entry]).await.expect("append");
    tx.commit().await.expect("commit");
    assert_eq!(seqs, [1]);
}

/// Each `INSERT INTO core.ledger` of the adapter's `.sql` files below `dir`: (file, the
/// columns it names, empty when it names none).
fn ledger_inserts(dir: &std::path::Path) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the sources") {
        let path = entry.expect("a source").path();
        if path.is_dir() {
            found.extend(ledger_inserts(&path));
            continue;
        }
        if path.extension().is_none_or(|e| e != "sql") {
            continue;
        }
        let sql = std::fs::read_to_string(&path).expect("a statement");
        for (at, _) in sql.match_indices("INSERT INTO core.ledger") {
            let rest = &sql[at + "INSERT INTO core.ledger".len()..];
            // Another table whose name begins the same (core.ledger_checkpoints).
            if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = rest.trim_start();
            let columns = rest
                .strip_prefix('(')
                .and_then(|r| r.split_once(')'))
                .map(|(list, _)| list.split(',').map(|c| c.trim().to_owned()).collect())
                .unwrap_or_default();
            found.push((path.display().to_string(), columns));
        }
    }
    found
}

#[test]
fn every_ledger_insert_of_the_adapter_names_only_columns_the_runtime_role_may_write() {
    let inserts = ledger_inserts(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src"
    )));
    let writable = |c: &String| LEDGER_INSERT_COLUMNS.contains(&c.as_str());
    let refused: Vec<&(String, Vec<String>)> = inserts
        .iter()
        .filter(|(_, columns)| columns.is_empty() || !columns.iter().all(writable))
        .collect();
    assert_eq!((inserts.is_empty(), refused), (false, vec![]));
}
