//! How the container test runs the image: the security context of `deploy/k8s/deployment.yaml`
//! (and of the migrate Job, which has the same), as `docker run` flags. A test reads the
//! manifests and fails when they and these flags drift apart.

/// The pod and container security context, and the memory limit, of the manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Confinement {
    pub user: u32,
    pub group: u32,
    pub read_only_root: bool,
    /// `capabilities.drop: ["ALL"]`.
    pub drop_all_capabilities: bool,
    /// `allowPrivilegeEscalation: false`, Docker's `no-new-privileges`.
    pub no_new_privileges: bool,
    /// The container's memory limit, as Kubernetes writes it (`128Mi`).
    pub memory_limit: &'static str,
}

/// What the container test runs the image with (the manifests' values; see the test below).
pub(crate) const CONFINEMENT: Confinement = Confinement {
    user: 65532,
    group: 65532,
    read_only_root: true,
    drop_all_capabilities: true,
    no_new_privileges: true,
    memory_limit: "128Mi",
};

impl Confinement {
    /// `docker run` flags that apply this confinement. Swap is off (`--memory-swap` equal to
    /// `--memory`), as on a Kubernetes node.
    pub(crate) fn docker_flags(&self) -> Vec<String> {
        let bytes = mebibytes(self.memory_limit).map(|m| format!("{m}m"));
        let mut flags = vec![format!("--user={}:{}", self.user, self.group)];
        if self.read_only_root {
            flags.push("--read-only".into());
        }
        if self.drop_all_capabilities {
            flags.push("--cap-drop=ALL".into());
        }
        if self.no_new_privileges {
            flags.push("--security-opt=no-new-privileges".into());
        }
        if let Some(m) = bytes {
            flags.push(format!("--memory={m}"));
            flags.push(format!("--memory-swap={m}"));
        }
        flags
    }
}

/// `128Mi` → 128; other units are not used by the manifests.
fn mebibytes(quantity: &str) -> Option<u64> {
    quantity.strip_suffix("Mi")?.parse().ok()
}

#[cfg(test)]
mod tests;
