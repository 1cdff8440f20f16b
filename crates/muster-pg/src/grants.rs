//! The runtime role: what `muster serve` may do in Logbook, granted by `muster migrate` (which
//! runs as the schema owner) and checked by `serve` at its first connection.
//!
//! [`RUNTIME_GRANTS`] is the whole list: every table, sequence and function of schema `core`
//! appears in it with exactly the privileges `serve` needs (an object with none is listed with
//! none). A migration that adds an object adds its line here; the test `grants::tests` fails
//! for an object of the catalog that is missing, and for any privilege more or less than the
//! list's. On `core.ledger` the runtime role may only `SELECT`, and `INSERT` into the columns
//! the adapter's statements name ([`LEDGER_INSERT_COLUMNS`]): not `seq` (so it cannot choose a
//! row's place in the feed, `OVERRIDING SYSTEM VALUE` or not) and not `tx`. It owns nothing, so
//! it cannot alter, truncate or switch off a trigger of anything.
//!
//! [`check_connected_role`] says what the role `serve` connects as can do beyond that list:
//! superuser, `CREATEROLE` or the schema owner's rights, each held itself or through a role it
//! is a member of (a member can `SET ROLE` to it, `NOINHERIT` or not), and every privilege on
//! Muster's objects that it or such a role holds beyond the list.

use crate::PgError;

/// `--runtime-role`'s default.
pub const DEFAULT_RUNTIME_ROLE: &str = "muster_app";

/// What kind of object a grant is on (each has its own privileges in PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Table,
    Sequence,
    Function,
}

impl ObjectKind {
    /// Every privilege PostgreSQL knows for this kind of object.
    pub fn all_privileges(self) -> &'static [&'static str] {
        match self {
            ObjectKind::Table => &[
                "SELECT",
                "INSERT",
                "UPDATE",
                "DELETE",
                "TRUNCATE",
                "REFERENCES",
                "TRIGGER",
            ],
            ObjectKind::Sequence => &["USAGE", "SELECT", "UPDATE"],
            ObjectKind::Function => &["EXECUTE"],
        }
    }

    fn keyword(self) -> &'static str {
        match self {
            ObjectKind::Table => "TABLE",
            ObjectKind::Sequence => "SEQUENCE",
            ObjectKind::Function => "FUNCTION",
        }
    }
}

/// The privileges of the runtime role on one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub kind: ObjectKind,
    /// Qualified name; a function with its argument types (`core.f(text)`).
    pub object: &'static str,
    /// On the whole object.
    pub privileges: &'static [&'static str],
    /// On some columns of a table only; every other column must not have that privilege.
    pub on_columns: &'static [ColumnGrant],
}

/// A privilege on some columns of a table (`GRANT INSERT (a, b) ON TABLE t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnGrant {
    pub privilege: &'static str,
    pub columns: &'static [&'static str],
}

/// The columns of `core.ledger` the runtime role may write: what the adapter's `INSERT`s name.
/// `seq` (the feed's order) and `tx` (the inserting transaction, for the feed's snapshots) take
/// their defaults.
pub const LEDGER_INSERT_COLUMNS: &[&str] = &[
    "subject_type",
    "subject_id",
    "subject_seq",
    "event",
    "from_state",
    "to_state",
    "actor",
    "fence",
    "at",
    "data",
    "prev_hash",
    "hash",
    "kind",
    "priority",
];

const fn table(object: &'static str, privileges: &'static [&'static str]) -> Grant {
    Grant {
        kind: ObjectKind::Table,
        object,
        privileges,
        on_columns: &[],
    }
}

/// Every object of schema `core` and what the runtime role may do with it.
pub const RUNTIME_GRANTS: &[Grant] = &[
    table("core.schema_migrations", &["SELECT"]),
    table("core.items", &["SELECT", "INSERT", "UPDATE"]),
    table("core.leases", &["SELECT", "INSERT", "UPDATE"]),
    // Append-only for the server: the chain can be extended and read, nothing else; a row's
    // `seq` and `tx` are the database's.
    Grant {
        kind: ObjectKind::Table,
        object: "core.ledger",
        privileges: &["SELECT"],
        on_columns: &[ColumnGrant {
            privilege: "INSERT",
            columns: LEDGER_INSERT_COLUMNS,
        }],
    },
    table("core.worker_digests", &["SELECT", "INSERT", "UPDATE"]),
    table("core.worker_health", &["SELECT", "INSERT", "UPDATE"]),
    table("core.edits", &["SELECT", "INSERT", "UPDATE"]),
    table("core.intake_secrets", &["SELECT", "INSERT"]),
    table("core.intake_salts", &["SELECT", "INSERT", "DELETE"]),
    table(
        "core.intake_counts",
        &["SELECT", "INSERT", "UPDATE", "DELETE"],
    ),
    table("core.pow_spent", &["SELECT", "INSERT", "DELETE"]),
    table("core.kind_pauses", &["SELECT", "INSERT", "UPDATE"]),
    // Append-only like the ledger: checkpoints are taken and read, nothing else.
    table("core.ledger_checkpoints", &["SELECT", "INSERT"]),
    // Retention (V18): the live feed reads the removed-item counts; finished items are removed
    // only through core.remove_finished, which runs as the schema owner.
    table("core.retention_removed", &["SELECT"]),
    Grant {
        kind: ObjectKind::Function,
        object: "core.remove_finished(text, text, smallint, uuid, double precision, integer)",
        privileges: &["EXECUTE"],
        on_columns: &[],
    },
    // Archived ledger segments (V20): read by item reads, the feed and `ledger-verify`; written
    // only by `ledger-prune`, as the schema owner.
    table("core.ledger_archived", &["SELECT"]),
    table("core.ledger_anchors", &["SELECT"]),
    // The ledger's identity sequence: an identity column draws its value without a privilege
    // check, so INSERT on the table is all it takes.
    Grant {
        kind: ObjectKind::Sequence,
        object: "core.ledger_seq_seq",
        privileges: &[],
        on_columns: &[],
    },
    Grant {
        kind: ObjectKind::Function,
        object: "core.expect_rows(text, bigint, bigint)",
        privileges: &["EXECUTE"],
        on_columns: &[],
    },
    // A trigger fires whatever the privileges of the one whose statement fired it.
    Grant {
        kind: ObjectKind::Function,
        object: "core.ledger_refuse_change()",
        privileges: &[],
        on_columns: &[],
    },
];

/// A role name as an SQL identifier. Only plain lower-case names are accepted, so that the
/// name needs no quoting rules of its own and means the same in psql and in Kubernetes.
pub fn validate_role(role: &str) -> Result<(), PgError> {
    let mut chars = role.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && role.len() <= 63 && !role.starts_with("pg_") {
        Ok(())
    } else {
        Err(PgError::Role(format!(
            "runtime role {role:?}: a role name is 1 to 63 of a-z, 0-9 and _, not starting with a digit or pg_"
        )))
    }
}

/// Refuses to migrate as the runtime role itself (it would own what it must not change).
pub(crate) async fn refuse_runtime_role_as_owner(
    client: &tokio_postgres::Client,
    role: &str,
) -> Result<(), PgError> {
    let me: String = client
        .query_one(include_str!("grants/sql/current_user.sql"), &[])
        .await?
        .get(0);
    if me == role {
        return Err(PgError::Role(format!(
            "`muster migrate` is connected as {role}, the runtime role: migrate as the schema owner, serve as {role}"
        )));
    }
    Ok(())
}

/// Creates the runtime role (`NOLOGIN`) when it does not exist and gives it exactly
/// [`RUNTIME_GRANTS`] (each listed object's privileges revoked, then the listed ones granted),
/// plus `USAGE` on schema `core`. Runs as the schema owner, inside `migrate`'s lock.
pub(crate) async fn grant_runtime_role(
    client: &mut deadpool_postgres::Object,
    role: &str,
) -> Result<(), PgError> {
    validate_role(role)?;
    let exists = client
        .query_opt(include_str!("grants/sql/role_exists.sql"), &[&role])
        .await?
        .is_some();
    if !exists {
        match client
            .batch_execute(&format!("CREATE ROLE {role} NOLOGIN"))
            .await
        {
            Ok(()) => tracing::info!(
                role,
                "runtime role created (NOLOGIN): give it a login and password out of band"
            ),
            // Created by a concurrent `migrate` of another database of the same cluster.
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_OBJECT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let tx = client.transaction().await?;
    let mut sql = format!("GRANT USAGE ON SCHEMA core TO {role};\n");
    for g in RUNTIME_GRANTS {
        // An object a newer release dropped (this binary migrating a newer schema after a
        // rollback) is left alone: the newer release's grants are in force.
        let lookup = match g.kind {
            ObjectKind::Function => include_str!("grants/sql/function_exists.sql"),
            _ => include_str!("grants/sql/relation_exists.sql"),
        };
        if !tx.query_one(lookup, &[&g.object]).await?.get::<_, bool>(0) {
            tracing::warn!(object = g.object, "not granted: the object does not exist");
            continue;
        }
        let kw = g.kind.keyword();
        sql.push_str(&format!("REVOKE ALL ON {kw} {} FROM {role};\n", g.object));
        if g.kind == ObjectKind::Function {
            // Functions are executable by PUBLIC by default: only the listed grants count.
            sql.push_str(&format!("REVOKE ALL ON {kw} {} FROM PUBLIC;\n", g.object));
        }
        if !g.privileges.is_empty() {
            sql.push_str(&format!(
                "GRANT {} ON {kw} {} TO {role};\n",
                g.privileges.join(", "),
                g.object
            ));
        }
        // (REVOKE ALL on a table took its column privileges back too.)
        for c in g.on_columns {
            sql.push_str(&format!(
                "GRANT {} ({}) ON {kw} {} TO {role};\n",
                c.privilege,
                c.columns.join(", "),
                g.object
            ));
        }
    }
    tx.batch_execute(&sql).await?;
    tx.commit().await?;
    tracing::info!(role, objects = RUNTIME_GRANTS.len(), "runtime role granted");
    Ok(())
}

/// What the connected role is, as far as `serve` cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleCheck {
    /// A role with every privilege `serve` needs; `extra`: what it (or a role it can `SET
    /// ROLE` to) holds beyond them, each as `PRIVILEGE on object`.
    Runtime { role: String, extra: Vec<String> },
    /// A superuser, the schema owner, a role with `CREATEROLE`, or a member of one of them:
    /// everything works, nothing is protected. `why` says which, naming the roles.
    Privileged { role: String, why: String },
    /// A role that lacks privileges `serve` needs (each as `PRIVILEGE on object`), and what it
    /// holds beyond them.
    Missing {
        role: String,
        missing: Vec<String>,
        extra: Vec<String>,
    },
}

/// One privilege (`PRIVILEGE on object`, or `PRIVILEGE (column) on object`).
fn privilege_line(privilege: &str, column: Option<&str>, object: &str) -> String {
    match column {
        Some(c) => format!("{privilege} ({c}) on {object}"),
        None => format!("{privilege} on {object}"),
    }
}

/// Whether [`RUNTIME_GRANTS`] lists `privilege` on `object` (on `column` of it, when given).
fn wanted(object: &str, column: Option<&str>, privilege: &str) -> bool {
    RUNTIME_GRANTS
        .iter()
        .filter(|g| g.object == object)
        .any(|g| match column {
            None => g.privileges.contains(&privilege),
            Some(c) => g
                .on_columns
                .iter()
                .any(|cg| cg.privilege == privilege && cg.columns.contains(&c)),
        })
}

/// The privileges `role` lacks or has beyond [`RUNTIME_GRANTS`], each as `PRIVILEGE on object`
/// or `PRIVILEGE (column) on object` (`missing`, `extra`). Counts grants to PUBLIC and through
/// role membership, as PostgreSQL does; `extra` also counts what a role `role` can `SET ROLE`
/// to holds (a `NOINHERIT` membership included).
pub async fn privilege_differences(
    client: &tokio_postgres::Client,
    role: &str,
) -> Result<(Vec<String>, Vec<String>), PgError> {
    let (mut kinds, mut objects, mut privileges) = (Vec::new(), Vec::new(), Vec::new());
    for g in RUNTIME_GRANTS {
        for p in g.kind.all_privileges() {
            // A privilege granted on columns is asked of every column of the table instead.
            let kind = if g.on_columns.iter().any(|c| c.privilege == *p) {
                "COLUMNS"
            } else {
                g.kind.keyword()
            };
            kinds.push(kind);
            objects.push(g.object);
            privileges.push(*p);
        }
    }
    let rows = client
        .query(
            include_str!("grants/sql/privileges.sql"),
            &[&role, &kinds, &objects, &privileges],
        )
        .await?;
    let mut missing = Vec::new();
    let mut extra = Vec::new();
    for r in rows {
        let (object, column, p): (String, Option<String>, String) = (r.get(0), r.get(1), r.get(2));
        let (held, reachable): (bool, bool) = (r.get(3), r.get(4));
        let line = privilege_line(&p, column.as_deref(), &object);
        match (wanted(&object, column.as_deref(), &p), held, reachable) {
            (true, false, _) => missing.push(line),
            (false, _, true) => extra.push(line),
            _ => {}
        }
    }
    let schema = client
        .query_one(include_str!("grants/sql/schema_privileges.sql"), &[&role])
        .await?;
    if !schema.get::<_, bool>(0) {
        missing.push(privilege_line("USAGE", None, "schema core"));
    }
    if schema.get::<_, bool>(1) {
        extra.push(privilege_line("CREATE", None, "schema core"));
    }
    Ok((missing, extra))
}

/// Why the connected role is [`RoleCheck::Privileged`], from `connected_role.sql`'s row; `None`
/// when it is not.
fn privileged_because(row: &tokio_postgres::Row) -> Option<String> {
    if row.get::<_, bool>(1) {
        return Some("a superuser".into());
    }
    let through = |i: usize| row.get::<_, Option<String>>(i);
    let mut why = Vec::new();
    if let Some(roles) = through(3) {
        why.push(format!(
            "a member of the superuser role {roles} (it can SET ROLE to it)"
        ));
    }
    if row.get::<_, bool>(4) {
        why.push("the schema owner".to_owned());
    } else if let Some(owner) = through(5) {
        why.push(format!(
            "a member of the schema owner {owner} (it can SET ROLE {owner}, NOINHERIT or not)"
        ));
    }
    if row.get::<_, bool>(2) {
        why.push("a role with CREATEROLE (it can create roles and grant them)".to_owned());
    }
    if let Some(roles) = through(6) {
        why.push(format!(
            "a member of {roles}, which has CREATEROLE (it can SET ROLE to it)"
        ));
    }
    (!why.is_empty()).then(|| why.join(" and "))
}

/// Checks the connected role (at `serve`'s first connection): a superuser, the owner of
/// `core.ledger`, a role with `CREATEROLE`, or a member of one of them is
/// [`RoleCheck::Privileged`]; otherwise every privilege of [`RUNTIME_GRANTS`] must be there, and
/// what it holds beyond them is named.
pub async fn check_connected_role(client: &tokio_postgres::Client) -> Result<RoleCheck, PgError> {
    let row = client
        .query_one(include_str!("grants/sql/connected_role.sql"), &[])
        .await?;
    let role: String = row.get(0);
    if let Some(why) = privileged_because(&row) {
        return Ok(RoleCheck::Privileged { role, why });
    }
    let (missing, extra) = privilege_differences(client, &role).await?;
    Ok(if missing.is_empty() {
        RoleCheck::Runtime { role, extra }
    } else {
        RoleCheck::Missing {
            role,
            missing,
            extra,
        }
    })
}

#[cfg(test)]
mod tests;
