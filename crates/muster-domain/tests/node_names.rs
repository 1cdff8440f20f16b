//! Zero node names in health text: a corpus of the Kubernetes components' own event messages
//! (scheduler, kubelet, node lifecycle and node controllers) with node names of every common
//! provider and of arbitrary spelling. The message formats are those of the components' source
//! (`Successfully assigned %v/%v to %v`, `Node %s status is now: %s`, `Node %s event: %s`,
//! `Registered Node %s in Controller`, `Deleting node %v because it does not exist in the cloud
//! provider`, `Preempted by pod %v on node %v`, …).

use muster_domain::redact::{NodeNames, REDACTED, redact, redact_with};

/// Node names as providers and operators spell them.
const NODES: &[&str] = &[
    "ip-10-0-1-23.eu-west-1.compute.internal",
    "ip-192-168-12-7.ec2.internal",
    "i-0abc123def4567890",
    "gke-prod-default-pool-3f2a1b4c-x7k2",
    "aks-nodepool1-12345678-vmss000000",
    "kind-control-plane",
    "kind-worker",
    "kind-worker2",
    "minikube",
    "minikube-m02",
    "k3d-dev-server-0",
    "k3d-dev-agent-1",
    "k8s-prod-03",
    "worker-node-3",
    "node-1",
    "rack3-blade12",
    "bigiron",
    "Tidewater",
];

/// Messages that name a node where the components put it: redacted by position, whatever the
/// name's spelling, with no list of names at all.
const BY_POSITION: &[&str] = &[
    "Successfully assigned cs-workers/trawl-7f9c to {}",
    "Node {} status is now: NodeNotReady",
    "Node {} status is now: NodeHasSufficientMemory",
    "Node {} status is now: NodeReady",
    "Node {} status is now: CIDRNotAvailable",
    "Node {} event: Registered Node {} in Controller",
    "Node {} event: Removing Node {} from Controller",
    "Deleting node {} because it does not exist in the cloud provider",
    "Preempted by pod 7b1e4c6a-2f0d-4c4e-9a51-0d6f3f1f2a11 on node {}",
    "Node {} is not ready",
    "0/3 nodes are available: node {}",
    "Node {} has been rebooted, boot id: 3f1c2b0e-9a7d-4c2e-8b1f-5d6e7a8b9c0d",
    "Evicting pod cs-workers/assay-2 from node {}",
    "kubelet, {}  Started container trawl",
    "Marking node {} unschedulable",
    "error getting node \"{}\": not found",
    "nodes \"{}\" not found",
    "failed to place pod on \"{}\": node(s) had taints",
    "node '{}' is cordoned",
    "node\t{}\tNotReady",
    "Successfully assigned cs-workers/trawl-0 to\t{}",
    "see node/{} for details",
    "10.0.0.1node {} is gone",
];

/// Messages that name a node where no template knows it: redacted because the name is known.
const BY_NAME: &[&str] = &[
    "trawl-0 restarted on {} after an OOM kill",
    "scraping metrics.{}.corp failed",
    "Get https://kubelet.{}:10250/x: EOF",
    "Get \"https://{}:10250/containerLogs/cs-workers/trawl-0/trawl\": dial tcp: i/o timeout",
    "lease renewal by {}.corp.example failed",
    "{} rejected the pod: OutOfcpu",
];

/// What Conn shows and must survive: pods, namespaces, containers, reasons.
const SURVIVORS: &[&str] = &[
    "Started container trawl",
    "Back-off restarting failed container sextant in pod sextant-1_cs-workers(3c9d)",
    "Created pod: trawl-7f9c",
    "Scaled up replica set trawl-6d9f8 to 3",
    "pod cs-workers/sextant-1 NodeNotReady",
    "Readiness probe failed: HTTP probe failed with statuscode: 503",
    "The node was low on resource: memory. Threshold quantity: 100Mi, available: 92Mi.",
    "Updated Node Allocatable limit across pods",
    "0/3 nodes are available: 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }.",
    "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) didn't match Pod's node affinity/selector.",
    "Starting kubelet.",
    "Container image \"registry/trawl:1.4\" already present on machine",
];

/// `message` redacted by a list that knows the one node `name`.
fn knowing(name: &str, message: &str) -> (String, usize) {
    redact_with(message, &NodeNames::new([name]))
}

fn fill(template: &str, node: &str) -> String {
    template.replace("{}", node)
}

fn leaks(text: &str, node: &str) -> bool {
    text.to_ascii_lowercase()
        .contains(&node.to_ascii_lowercase())
}

/// Every message made from `templates` and each node name whose redaction by `redact` still
/// names a node, as `message -> redacted`.
fn leaked<'t>(
    templates: impl Iterator<Item = &'t &'t str>,
    redact: impl Fn(&str) -> (String, usize),
) -> Vec<String> {
    templates
        .flat_map(|template| NODES.iter().map(move |node| fill(template, node)))
        .filter_map(|message| {
            let (out, _) = redact(&message);
            NODES
                .iter()
                .any(|node| leaks(&out, node))
                .then(|| format!("{message} -> {out}"))
        })
        .collect()
}

#[test]
fn no_node_name_in_a_positional_message_survives_without_a_list_of_names() {
    assert_eq!(leaked(BY_POSITION.iter(), redact), Vec::<String>::new());
}

#[test]
fn no_known_node_name_survives_anywhere() {
    let nodes = NodeNames::new(NODES);
    let leaked = leaked(BY_POSITION.iter().chain(BY_NAME), |message| {
        redact_with(message, &nodes)
    });
    assert_eq!(leaked, Vec::<String>::new());
}

#[test]
fn pods_namespaces_containers_and_reasons_survive_with_every_name_known() {
    let nodes = NodeNames::new(NODES);
    for message in SURVIVORS {
        assert_eq!(redact_with(message, &nodes), ((*message).to_owned(), 0));
    }
}

#[test]
fn the_issues_examples_are_redacted_by_form_alone() {
    let examples = [
        (
            "Successfully assigned cs-workers/trawl-7f9c to kind-worker2",
            "Successfully assigned cs-workers/trawl-7f9c to [redacted]",
        ),
        (
            "Successfully assigned cs-workers/trawl-7f9c to i-0abc123def4567890",
            "Successfully assigned cs-workers/trawl-7f9c to [redacted]",
        ),
        (
            "Successfully assigned cs-workers/trawl-7f9c to k8s-prod-03",
            "Successfully assigned cs-workers/trawl-7f9c to [redacted]",
        ),
        (
            "Node rack3-blade12 is not ready",
            "Node [redacted] is not ready",
        ),
        (
            "0/3 nodes are available: node minikube",
            "0/3 nodes are available: node [redacted]",
        ),
    ];
    for (message, expected) in examples {
        assert_eq!(redact(message), (expected.to_owned(), 1), "{message}");
    }
}

#[test]
fn the_count_is_the_number_of_replaced_spans() {
    assert_eq!(
        knowing(
            "rack3-blade12",
            "Node rack3-blade12 event: Registered Node rack3-blade12 in Controller"
        ),
        (
            format!("Node {REDACTED} event: Registered Node {REDACTED} in Controller"),
            2
        )
    );
}

#[test]
fn a_known_name_is_found_in_any_case_inside_an_fqdn_and_a_url() {
    assert_eq!(
        knowing(
            "Bigiron",
            "BIGIRON bigiron.lab.example https://bigiron:10250/x"
        ),
        (format!("{REDACTED} {REDACTED} https://{REDACTED}/x"), 3)
    );
}

#[test]
fn a_known_name_inside_a_longer_token_is_not_a_match() {
    assert_eq!(
        knowing("trawl", "trawl-0 ran trawl"),
        (format!("trawl-0 ran {REDACTED}"), 1)
    );
}

#[test]
fn a_file_of_names_skips_blank_lines_and_comments() {
    let nodes = NodeNames::from_lines("# rack 3\nrack3-blade12\n\n  rack3-blade13  \n");
    assert_eq!(nodes, NodeNames::new(["rack3-blade12", "rack3-blade13"]));
}

#[test]
fn the_short_host_name_of_a_dotted_node_name_is_known() {
    assert_eq!(
        knowing("bigiron.lab.example", "bigiron restarted"),
        (format!("{REDACTED} restarted"), 1)
    );
}

#[test]
fn redacting_an_answer_again_finds_nothing_more() {
    let nodes = NodeNames::new(NODES);
    for template in BY_POSITION.iter().chain(BY_NAME) {
        for node in NODES {
            let (once, _) = redact_with(&fill(template, node), &nodes);
            assert_eq!(redact_with(&once, &nodes), (once.clone(), 0), "{once}");
            let (once, _) = redact(&fill(template, node));
            assert_eq!(redact(&once), (once.clone(), 0), "{once}");
        }
    }
}
