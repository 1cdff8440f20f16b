//! `muster-sim watch`: the operator's live view (`muster watch`, crates/muster-ops) over the
//! fleet's replicas, ending by itself once `--until-items` items exist and all are finished
//! (what `cargo xtask demo` waits for).

use muster_ops::watch::{Model, Until};

/// True once at least `items` items exist and every one is done or failed.
pub fn all_finished(items: u64) -> impl Fn(&Model) -> bool + Send + Sync + 'static {
    move |m| {
        let (finished, all) = m.totals();
        all >= items && finished == all
    }
}

/// Watches the feed of `urls` (the next one after a disconnect) until the user quits, a
/// signal, or (with `until_items`) every item is finished; the model at the end.
pub async fn watch(
    urls: &[String],
    token: &str,
    until_items: Option<u64>,
) -> Result<Model, muster_ops::OpsError> {
    let clients = urls
        .iter()
        .map(|u| muster_ops::Client::new(u, token))
        .collect::<Result<Vec<_>, _>>()?;
    let until = until_items.map(|n| Box::new(all_finished(n)) as Until);
    muster_ops::watch::run(clients, until).await
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use muster_ops::sse::SseEvent;

    use super::*;

    fn with_depths(depths: &str) -> Model {
        let now = Instant::now();
        let mut m = Model::new("http://m", now);
        m.apply(
            &SseEvent {
                id: None,
                event: "queues".into(),
                data: format!(r#"{{"at": "x", "depths": [{depths}]}}"#),
            },
            now,
        );
        m
    }

    #[test]
    fn the_watch_ends_once_that_many_items_exist_and_all_are_done_or_failed() {
        let done = r#"{"kind": "trawl", "priority": "normal", "state": "done", "count": 3}"#;
        let failed = r#"{"kind": "assay", "priority": "normal", "state": "failed", "count": 1}"#;
        let queued = r#"{"kind": "assay", "priority": "normal", "state": "queued", "count": 1}"#;
        assert!(all_finished(4)(&with_depths(&format!("{done}, {failed}"))));
        assert!(!all_finished(5)(&with_depths(&format!("{done}, {failed}"))));
        assert!(!all_finished(4)(&with_depths(&format!("{done}, {queued}"))));
    }
}
