use super::ClusterOptions;
use crate::host::{Account, account_from_passwd, version_key};

#[test]
fn reads_the_postgres_account_from_passwd() {
    let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                  postgres:x:101:104:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash\n";
    assert_eq!(
        account_from_passwd(passwd, "postgres"),
        Some(Account { uid: 101, gid: 104 })
    );
    assert_eq!(account_from_passwd(passwd, "nobody"), None);
}

#[test]
fn orders_postgresql_versions_numerically() {
    let mut keys = vec![version_key("9.6"), version_key("15"), version_key("10")];
    keys.sort();
    assert_eq!(keys, vec![Some(vec![9, 6]), Some(vec![10]), Some(vec![15])]);
    assert_eq!(version_key("common"), None);
}

#[test]
fn options_default_to_fast_and_roomy() {
    let options = ClusterOptions::default();
    assert!(!options.fsync);
    assert_eq!(options.max_connections, 200);
    assert_eq!(options.log_to, None);
}
