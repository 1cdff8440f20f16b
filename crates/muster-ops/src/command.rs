//! The operator commands: what `muster items …`, `muster kinds …`, `muster queues`,
//! `muster health` and `muster watch` call, and what they print.

use std::io::Write;
use std::str::FromStr;

use clap::{Args, Subcommand};
use muster_domain::{ItemState, Kind, Priority};
use serde_json::{Value, json};

use crate::table::{self, Column, left, right};
use crate::{Client, Exit, OpsError};

/// Where the operator commands go and how they print. Global flags of `muster`.
#[derive(Clone, Args)]
pub struct Target {
    /// Operator commands: base URL of a Muster replica.
    #[arg(
        long,
        env = "MUSTER_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// Operator commands: the bearer token (better in the variable: a flag shows in `ps`).
    #[arg(long, env = "MUSTER_API_TOKEN", hide_env_values = true, global = true)]
    pub api_token: Option<String>,
    /// Operator commands: print the API's JSON instead of tables (`items list`: one item a line).
    #[arg(long, global = true)]
    pub json: bool,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.url)
            .field("api_token", &self.api_token.as_ref().map(|_| "[redacted]"))
            .field("json", &self.json)
            .finish()
    }
}

/// The operator commands (through the HTTP API, with `--api-token`).
#[derive(Debug, Clone, Subcommand)]
pub enum OpsCommand {
    /// Find, inspect, retry and cancel items (operator or conn token; retry and cancel:
    /// operator).
    Items {
        #[command(subcommand)]
        command: ItemsCommand,
    },
    /// Pause or resume a kind: while paused none of its items is leased; leases already out
    /// go on (operator token).
    Kinds {
        #[command(subcommand)]
        command: KindsCommand,
    },
    /// Queue depths per kind, priority and state (operator or conn token).
    Queues,
    /// Worker health per kind, from Shipkeeper's newest report (operator or conn token).
    Health,
    /// A live view of the feed: depths, transitions per second, health, the stream's age
    /// (operator or conn token). `q` quits.
    Watch,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ItemsCommand {
    /// Every item that matches, oldest first (pages through all of them).
    List {
        /// queued, leased, done, failed or needs_subtool.
        #[arg(long, value_parser = named::<ItemState>)]
        state: Option<ItemState>,
        /// A worker kind (trawl, sextant, …).
        #[arg(long, value_parser = named::<Kind>)]
        kind: Option<Kind>,
        /// urgent, normal or backfill.
        #[arg(long, value_parser = named::<Priority>)]
        priority: Option<Priority>,
    },
    /// One item with its history.
    Show {
        /// The item's id.
        id: String,
    },
    /// Send a failed or parked (needs_subtool) item back to the queue (attempts reset), or
    /// with `--kind` up to `--max` items of that kind in `--state`, oldest first (operator
    /// token).
    Retry {
        /// The item's id.
        #[arg(required_unless_present = "kind", conflicts_with = "kind")]
        id: Option<String>,
        /// Retry this kind's items instead of one item.
        #[arg(long, value_parser = named::<Kind>)]
        kind: Option<Kind>,
        /// With `--kind`: failed (the default) or needs_subtool.
        #[arg(long, default_value = "failed", requires = "kind", value_parser = named::<ItemState>)]
        state: ItemState,
        /// With `--kind`: at most this many items (1 to 1000).
        #[arg(long, default_value_t = 1000, requires = "kind",
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        max: u32,
    },
    /// Cancel an item (queued, leased, needs_subtool or failed; a lease out on it is fenced
    /// off at once), or with `--kind` and `--state` up to `--max` items of that kind in that
    /// state, oldest first (operator token).
    Cancel {
        /// The item's id.
        #[arg(required_unless_present = "kind", conflicts_with = "kind")]
        id: Option<String>,
        /// Cancel this kind's items instead of one item.
        #[arg(long, requires = "state", value_parser = named::<Kind>)]
        kind: Option<Kind>,
        /// With `--kind`: queued, needs_subtool or failed.
        #[arg(long, requires = "kind", value_parser = named::<ItemState>)]
        state: Option<ItemState>,
        /// With `--kind`: at most this many items (1 to 1000).
        #[arg(long, default_value_t = 1000, requires = "kind",
              value_parser = clap::value_parser!(u32).range(1..=1000))]
        max: u32,
        /// Why (1 to 1000 bytes); kept in each item's ledger row with the operator.
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum KindsCommand {
    /// Pause a kind: its lease calls get nothing until it is resumed; pausing a paused kind
    /// changes nothing.
    Pause {
        /// A worker kind (trawl, sextant, …).
        #[arg(value_parser = named::<Kind>)]
        kind: Kind,
        /// Why (1 to 1000 bytes); kept in the kind's ledger entry with the operator.
        #[arg(long)]
        reason: String,
    },
    /// Resume a paused kind: its waiting lease calls are woken at once.
    Resume {
        /// A worker kind (trawl, sextant, …).
        #[arg(value_parser = named::<Kind>)]
        kind: Kind,
        /// Why, if you want it in the kind's ledger entry.
        #[arg(long)]
        reason: Option<String>,
    },
}

/// Prints a server's answer: as sent with `--json`, else as `text` renders it.
fn print_answer(
    out: &mut dyn Write,
    json: bool,
    answer: &Value,
    text: impl FnOnce(&Value) -> String,
) -> Result<(), OpsError> {
    if json {
        writeln!(out, "{answer}")?;
    } else {
        out.write_all(text(answer).as_bytes())?;
    }
    Ok(())
}

/// A value of a closed vocabulary (state, kind, priority), by its wire name.
fn named<T: FromStr>(raw: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    raw.parse().map_err(|e: T::Err| e.to_string())
}

/// Runs one command against `target`, printing to stdout and errors to stderr; the exit code.
pub async fn run(command: OpsCommand, target: &Target) -> Exit {
    let result = match Client::new(&target.url, target.api_token.as_deref().unwrap_or("")) {
        Ok(client) => match command {
            OpsCommand::Watch => crate::watch::run(vec![client], None).await.map(|_| ()),
            other => {
                let mut out = std::io::stdout().lock();
                run_to(&client, other, target.json, &mut out).await
            }
        },
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Exit::Ok,
        Err(OpsError::Terminal(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Ok,
        Err(e) => {
            eprintln!("muster: {e}");
            e.exit()
        }
    }
}

/// Runs a command other than `watch`, writing what it prints to `out`.
pub async fn run_to(
    client: &Client,
    command: OpsCommand,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    match command {
        OpsCommand::Items { command } => match command {
            ItemsCommand::List {
                state,
                kind,
                priority,
            } => list(client, state, kind, priority, json, out).await,
            ItemsCommand::Show { id } => {
                let item = client.get(&format!("/v1/items/{}", item_id(&id)?)).await?;
                print_answer(out, json, &item, show)
            }
            ItemsCommand::Retry {
                id,
                kind,
                state,
                max,
            } => {
                let answer = match (id, kind) {
                    (Some(id), _) => {
                        client
                            .post(&format!("/v1/items/{}/retry", item_id(&id)?), None)
                            .await?
                    }
                    (None, Some(kind)) => {
                        let body =
                            json!({"kind": kind.as_str(), "state": state.as_str(), "max": max});
                        client.post("/v1/items/retry", Some(&body)).await?
                    }
                    (None, None) => return Err(OpsError::Usage("an id or --kind".into())),
                };
                print_answer(out, json, &answer, |a| changed(a, "retried"))
            }
            ItemsCommand::Cancel {
                id,
                kind,
                state,
                max,
                reason,
            } => {
                let answer = match (id, kind, state) {
                    (Some(id), _, _) => {
                        let body = json!({"reason": reason});
                        let path = format!("/v1/items/{}/cancel", item_id(&id)?);
                        client.post(&path, Some(&body)).await?
                    }
                    (None, Some(kind), Some(state)) => {
                        let body = json!({"kind": kind.as_str(), "state": state.as_str(),
                                          "max": max, "reason": reason});
                        client.post("/v1/items/cancel", Some(&body)).await?
                    }
                    _ => return Err(OpsError::Usage("an id or --kind and --state".into())),
                };
                print_answer(out, json, &answer, |a| changed(a, "cancelled"))
            }
        },
        OpsCommand::Kinds { command } => {
            let (kind, body) = match command {
                KindsCommand::Pause { kind, reason } => {
                    (kind, json!({"paused": true, "reason": reason}))
                }
                KindsCommand::Resume { kind, reason } => {
                    let mut body = json!({"paused": false});
                    if let Some(reason) = reason {
                        body["reason"] = Value::from(reason);
                    }
                    (kind, body)
                }
            };
            let answer = client
                .put(&format!("/v1/kinds/{}/paused", kind.as_str()), &body)
                .await?;
            print_answer(out, json, &answer, kind_state)
        }
        OpsCommand::Queues => {
            let body = client.get("/v1/queues").await?;
            print_answer(out, json, &body, queues)
        }
        OpsCommand::Health => {
            let body = client.get("/v1/health").await?;
            print_answer(out, json, &body, health)
        }
        OpsCommand::Watch => Err(OpsError::Usage("watch draws on a terminal".into())),
    }
}

/// An id as a path segment: letters, digits and dashes only (a UUID), so that no path or
/// query can be smuggled into the URL.
fn item_id(id: &str) -> Result<&str, OpsError> {
    if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        Ok(id)
    } else {
        Err(OpsError::Usage(format!("{id:?} is not an item id")))
    }
}

/// Items asked for per page: the contract's largest.
const PAGE: u32 = 500;

/// The columns of `items list`, with fixed widths so that pages printed one after the other
/// line up (an id is a UUID, the states and kinds are the contract's).
const LIST_COLUMNS: [Column; 7] = [
    left("ID"),
    left("KIND"),
    left("PRIORITY"),
    left("STATE"),
    right("ATTEMPT"),
    left("UPDATED"),
    left("LAST ERROR"),
];
const LIST_WIDTHS: [usize; 7] = [36, 11, 8, 13, 7, 27, 0];

async fn list(
    client: &Client,
    state: Option<ItemState>,
    kind: Option<Kind>,
    priority: Option<Priority>,
    json: bool,
    out: &mut dyn Write,
) -> Result<(), OpsError> {
    let mut query = format!("limit={PAGE}");
    for (name, value) in [
        ("state", state.map(|s| s.as_str())),
        ("kind", kind.map(|k| k.as_str())),
        ("priority", priority.map(|p| p.as_str())),
    ] {
        if let Some(value) = value {
            query.push_str(&format!("&{name}={value}"));
        }
    }
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(a) => format!("/v1/items?{query}&after={}", item_id(a)?),
            None => format!("/v1/items?{query}"),
        };
        let page = client.get(&path).await?;
        let items = page["items"]
            .as_array()
            .ok_or_else(|| OpsError::Protocol("a page without an items array".into()))?;
        if !json && after.is_none() {
            // The heading once the first page is in: nothing on stdout when it is refused.
            let heading: Vec<String> = LIST_COLUMNS.iter().map(|c| c.title.to_owned()).collect();
            out.write_all(table::line(&LIST_COLUMNS, &LIST_WIDTHS, &heading).as_bytes())?;
        }
        for item in items {
            if json {
                writeln!(out, "{item}")?;
            } else {
                out.write_all(
                    table::line(&LIST_COLUMNS, &LIST_WIDTHS, &list_row(item)).as_bytes(),
                )?;
            }
        }
        out.flush()?;
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return Ok(()),
        }
    }
}

/// A JSON value as a cell: strings bare, null as `-`, the rest as JSON.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `fields` of `v`, a cell each.
fn cells(v: &Value, fields: &[&str]) -> Vec<String> {
    fields.iter().map(|f| cell(&v[f])).collect()
}

fn list_row(item: &Value) -> Vec<String> {
    let error = &item["last_error"];
    let mut row = cells(
        item,
        &["id", "kind", "priority", "state", "attempt", "updated_at"],
    );
    row.push(if error.is_null() {
        String::new()
    } else {
        format!("{}: {}", cell(&error["code"]), cell(&error["message"]))
    });
    row
}

/// `items show`: the item's fields, one a line, then its history.
pub fn show(item: &Value) -> String {
    let mut out = String::new();
    let fields = [
        "id",
        "kind",
        "priority",
        "state",
        "attempt",
        "not_before",
        "created_at",
        "payload",
        "result",
    ];
    for field in fields {
        out.push_str(&format!("{field:<11} {}\n", cell(&item[field])));
    }
    out.push_str("history:\n");
    let rows: Vec<Vec<String>> = item["history"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| cells(h, &["seq", "at", "event", "from", "to", "actor", "fence"]))
        .collect();
    out.push_str(&table::render(
        &[
            right("SEQ"),
            left("AT"),
            left("EVENT"),
            left("FROM"),
            left("TO"),
            left("ACTOR"),
            right("FENCE"),
        ],
        &rows,
    ));
    out
}

/// `items retry` and `items cancel`: what was sent back or cancelled (`what`, the bulk
/// answer's count field).
fn changed(answer: &Value, what: &str) -> String {
    if let Some(ids) = answer["item_ids"].as_array() {
        let mut out = format!("{what} {}\n", cell(&answer[what]));
        for id in ids {
            out.push_str(&format!("{}\n", cell(id)));
        }
        out
    } else {
        format!("{}  {}\n", cell(&answer["item_id"]), cell(&answer["state"]))
    }
}

/// `kinds pause` and `kinds resume`: the kind's state, and since when.
fn kind_state(answer: &Value) -> String {
    let state = if answer["paused"] == true {
        "paused"
    } else {
        "active"
    };
    format!(
        "{}  {state}  since {}\n",
        cell(&answer["kind"]),
        cell(&answer["since"])
    )
}

/// The depth columns of `queues` and `muster watch`: the state on the wire and its heading, in
/// the order an item moves through them.
pub(crate) const STATES: [(&str, &str); 6] = [
    ("queued", "QUEUED"),
    ("leased", "LEASED"),
    ("needs_subtool", "PARKED"),
    ("failed", "FAILED"),
    ("done", "DONE"),
    ("cancelled", "CANCELLED"),
];

/// Kinds in pipeline order, then any the server names that this build does not know.
pub(crate) fn kind_order(names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut kinds: Vec<String> = Kind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
    let mut extra: Vec<String> = names.into_iter().filter(|n| !kinds.contains(n)).collect();
    extra.sort();
    extra.dedup();
    kinds.extend(extra);
    kinds
}

/// `queues`: a row per kind and priority that has items, a column per state.
pub fn queues(body: &Value) -> String {
    let depths = body["depths"].as_array().cloned().unwrap_or_default();
    let count = |kind: &str, priority: &str, state: &str| -> u64 {
        depths
            .iter()
            .filter(|d| d["kind"] == kind && d["priority"] == priority && d["state"] == state)
            .filter_map(|d| d["count"].as_u64())
            .sum()
    };
    let kinds = kind_order(
        depths
            .iter()
            .filter_map(|d| d["kind"].as_str().map(str::to_owned)),
    );
    let mut priorities: Vec<String> = Priority::ALL
        .iter()
        .map(|p| p.as_str().to_owned())
        .collect();
    for d in &depths {
        if let Some(p) = d["priority"]
            .as_str()
            .filter(|p| !priorities.iter().any(|q| q == p))
        {
            priorities.push(p.to_owned());
        }
    }
    let mut rows = Vec::new();
    for kind in &kinds {
        for priority in &priorities {
            let present = depths
                .iter()
                .any(|d| d["kind"] == kind.as_str() && d["priority"] == priority.as_str());
            if !present {
                continue;
            }
            let mut row = vec![kind.clone(), priority.clone()];
            row.extend(
                STATES
                    .iter()
                    .map(|(s, _)| count(kind, priority, s).to_string()),
            );
            rows.push(row);
        }
    }
    let mut columns = vec![left("KIND"), left("PRIORITY")];
    columns.extend(STATES.iter().map(|(_, title)| right(title)));
    let mut out = table::render(&columns, &rows);
    let paused: Vec<String> = body["paused"]
        .as_array()
        .into_iter()
        .flatten()
        .map(cell)
        .collect();
    if !paused.is_empty() {
        out.push_str(&format!("\npaused: {}\n", paused.join(", ")));
    }
    out
}

/// `health`: a row per kind with a stored report, then the newest report's events.
pub fn health(body: &Value) -> String {
    let kinds = body["kinds"].as_array().cloned().unwrap_or_default();
    let rows: Vec<Vec<String>> = kinds
        .iter()
        .map(|k| cells(k, &["kind", "ready", "phase", "restarts", "digest", "at"]))
        .collect();
    let mut out = table::render(
        &[
            left("KIND"),
            left("READY"),
            left("PHASE"),
            right("RESTARTS"),
            left("DIGEST"),
            left("AT"),
        ],
        &rows,
    );
    let events: Vec<Vec<String>> = kinds
        .iter()
        .flat_map(|k| {
            k["events"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|e| vec![cell(&k["kind"]), cell(&e["reason"]), cell(&e["message"])])
        })
        .collect();
    if !events.is_empty() {
        out.push('\n');
        out.push_str(&table::render(
            &[left("KIND"), left("EVENT"), left("MESSAGE")],
            &events,
        ));
    }
    out
}
