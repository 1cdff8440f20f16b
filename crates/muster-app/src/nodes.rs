//! What Muster knows of the cluster's node names, shared by the source that learns them (the
//! API server's node list, or a file of names) and the health use case that redacts with them.

use std::sync::Arc;

use muster_domain::health::NodeKnowledge;
use muster_domain::redact::NodeNames;

use crate::shared::Shared;

/// The current knowledge, cheap to take for every report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeSnapshot {
    /// No source is configured: node names are redacted by form and position only.
    FormOnly,
    /// A source is configured and has not answered yet, or not for too long.
    Unknown,
    /// The names the source gave last.
    Known(Arc<NodeNames>),
}

impl NodeSnapshot {
    pub fn knowledge(&self) -> NodeKnowledge<'_> {
        match self {
            NodeSnapshot::FormOnly => NodeKnowledge::FormOnly,
            NodeSnapshot::Unknown => NodeKnowledge::Unknown,
            NodeSnapshot::Known(names) => NodeKnowledge::Names(names),
        }
    }
}

/// The node names in force. A source writes ([`set_names`](Self::set_names),
/// [`set_unknown`](Self::set_unknown)); the health use case reads ([`snapshot`](Self::snapshot)).
#[derive(Debug)]
pub struct NodeDirectory {
    state: Shared<NodeSnapshot>,
}

impl NodeDirectory {
    /// No source of names: form and position only, for good.
    pub fn form_only() -> Self {
        NodeDirectory {
            state: Shared::new(NodeSnapshot::FormOnly),
        }
    }

    /// A source is configured: unknown until it gives its first names.
    pub fn awaiting_source() -> Self {
        NodeDirectory {
            state: Shared::new(NodeSnapshot::Unknown),
        }
    }

    pub fn set_names(&self, names: NodeNames) {
        self.state.replace(NodeSnapshot::Known(Arc::new(names)));
    }

    pub fn set_unknown(&self) {
        self.state.replace(NodeSnapshot::Unknown);
    }

    pub fn snapshot(&self) -> NodeSnapshot {
        self.state.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_awaiting_its_source_knows_nothing_until_the_first_names() {
        let directory = NodeDirectory::awaiting_source();
        assert_eq!(directory.snapshot(), NodeSnapshot::Unknown);
        directory.set_names(NodeNames::new(["kind-worker"]));
        assert_eq!(
            directory.snapshot(),
            NodeSnapshot::Known(Arc::new(NodeNames::new(["kind-worker"])))
        );
    }

    #[test]
    fn a_source_that_goes_quiet_makes_the_names_unknown_again() {
        let directory = NodeDirectory::awaiting_source();
        directory.set_names(NodeNames::new(["kind-worker"]));
        directory.set_unknown();
        assert_eq!(directory.snapshot().knowledge(), NodeKnowledge::Unknown);
    }
}
